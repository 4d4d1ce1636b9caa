/* PJRT plugin loading and error conversion. */
#include "backends/pjrt/plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "torchtpu/pjrt.h"

/* Plugins loaded so far, keyed by the library's real path. Never unloaded:
 * XLA-based plugins keep threads and static state that do not survive
 * dlclose. */
typedef struct tt_pjrt_loaded_plugin_s {
  char *real_path;
  const tt_pjrt_abi_api_t *api;
  struct tt_pjrt_loaded_plugin_s *next;
} tt_pjrt_loaded_plugin_t;

static pthread_mutex_t tt_pjrt_plugins_lock = PTHREAD_MUTEX_INITIALIZER;
static tt_pjrt_loaded_plugin_t *tt_pjrt_plugins;

static tt_code_t code_from_plugin(int plugin_code) {
  switch (plugin_code) {
    case 3: return TT_INVALID_ARGUMENT;
    case 5: return TT_IO_ERROR; /* not found */
    case 8: return TT_RESOURCE_EXHAUSTED;
    case 11: return TT_OUT_OF_RANGE;
    case 12: return TT_UNIMPLEMENTED;
    default: return TT_INTERNAL;
  }
}

tt_status_t tt_pjrt_plugin_status(const tt_pjrt_abi_api_t *api, tt_pjrt_abi_error_t *error,
                                  const char *what) {
  if (!error) return NULL;
  tt_pjrt_abi_error_message_args_t msg = {0};
  msg.struct_size = sizeof(msg);
  msg.error = error;
  api->error_message(&msg);
  tt_pjrt_abi_error_get_code_args_t code = {0};
  code.struct_size = sizeof(code);
  code.error = error;
  tt_code_t tt_code = TT_INTERNAL;
  tt_pjrt_abi_error_t *code_error = api->error_get_code(&code);
  if (code_error) {
    /* The code is a nicety; an error while reading it is dropped. */
    tt_pjrt_abi_error_destroy_args_t d = {sizeof(d), NULL, code_error};
    api->error_destroy(&d);
  } else {
    tt_code = code_from_plugin(code.code);
  }
  tt_status_t st = tt_status_make(tt_code, "%s: %.*s", what, (int)msg.message_size,
                                  msg.message ? msg.message : "(no message)");
  tt_pjrt_abi_error_destroy_args_t d = {sizeof(d), NULL, error};
  api->error_destroy(&d);
  return st;
}

tt_status_t tt_pjrt_plugin_await(const tt_pjrt_abi_api_t *api, tt_pjrt_abi_event_t *event,
                                 const char *what) {
  if (!event) return NULL;
  tt_pjrt_abi_event_args_t args = {sizeof(args), NULL, event};
  tt_status_t st = tt_pjrt_plugin_status(api, api->event_await(&args), what);
  tt_pjrt_abi_event_args_t destroy = {sizeof(destroy), NULL, event};
  tt_status_t st2 = tt_pjrt_plugin_status(api, api->event_destroy(&destroy), "PJRT_Event_Destroy");
  if (st) {
    tt_status_free(st2);
    return st;
  }
  return st2;
}

/* The checks on a table fresh from GetPjrtApi, before any call through it. */
static tt_status_t check_api(const char *path, const tt_pjrt_abi_api_t *api) {
  if (!api)
    return tt_status_make(TT_INVALID_ARGUMENT, "PJRT plugin %s: GetPjrtApi returned NULL", path);
  if (api->version.struct_size < sizeof(tt_pjrt_abi_api_version_t))
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "PJRT plugin %s: its API version struct is %zu bytes, expected at "
                          "least %zu; not a PJRT C API table this backend understands",
                          path, api->version.struct_size, sizeof(tt_pjrt_abi_api_version_t));
  int major = api->version.major_version, minor = api->version.minor_version;
  if (major != TT_PJRT_ABI_MAJOR || minor < TT_PJRT_ABI_MIN_MINOR)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "PJRT plugin %s speaks PJRT C API %d.%d; this backend needs %d.x with "
                          "x >= %d",
                          path, major, minor, TT_PJRT_ABI_MAJOR, TT_PJRT_ABI_MIN_MINOR);
  if (api->struct_size < sizeof(tt_pjrt_abi_api_t))
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "PJRT plugin %s (API %d.%d): its function table is %zu bytes, shorter "
                          "than the %zu bytes of slots this backend calls",
                          path, major, minor, api->struct_size, sizeof(tt_pjrt_abi_api_t));
  /* Every slot this backend calls must be filled. */
  const void *needed[] = {
      (const void *)api->error_destroy, (const void *)api->error_message,
      (const void *)api->error_get_code, (const void *)api->plugin_initialize,
      (const void *)api->event_destroy, (const void *)api->event_await,
      (const void *)api->client_create, (const void *)api->client_destroy,
      (const void *)api->client_platform_name, (const void *)api->client_platform_version,
      (const void *)api->client_addressable_devices, (const void *)api->client_compile,
      (const void *)api->client_buffer_from_host_buffer,
      (const void *)api->device_description_id, (const void *)api->device_description_kind,
      (const void *)api->device_get_description, (const void *)api->executable_destroy,
      (const void *)api->executable_num_outputs, (const void *)api->loaded_executable_destroy,
      (const void *)api->loaded_executable_get_executable,
      (const void *)api->loaded_executable_execute, (const void *)api->buffer_destroy,
      (const void *)api->buffer_element_type, (const void *)api->buffer_dimensions,
      (const void *)api->buffer_to_host_buffer,
  };
  for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++)
    if (!needed[i])
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "PJRT plugin %s (API %d.%d): function table entry %zu of the ones "
                            "this backend calls is NULL",
                            path, major, minor, i);
  return NULL;
}

static tt_status_t load_locked(const char *path, const tt_pjrt_abi_api_t **out_api) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return tt_status_make(TT_IO_ERROR, "PJRT plugin %s: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return tt_status_make(TT_IO_ERROR, "PJRT plugin %s: not a regular file", path);
  char real[PATH_MAX];
  if (!realpath(path, real))
    return tt_status_make(TT_IO_ERROR, "PJRT plugin %s: %s", path, strerror(errno));
  for (tt_pjrt_loaded_plugin_t *p = tt_pjrt_plugins; p; p = p->next) {
    if (strcmp(p->real_path, real) == 0) {
      *out_api = p->api;
      return NULL;
    }
  }
  dlerror();
  /* RTLD_LOCAL: two plugins built from different XLA versions must not
   * resolve each other's symbols. */
  void *handle = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    return tt_status_make(TT_IO_ERROR, "PJRT plugin %s could not be loaded: %s", path,
                          why ? why : "dlopen failed");
  }
  typedef const tt_pjrt_abi_api_t *get_api_fn(void);
  get_api_fn *get_api;
  /* POSIX guarantees object-to-function pointer conversion for dlsym. */
  *(void **)&get_api = dlsym(handle, "GetPjrtApi");
  if (!get_api) {
    dlclose(handle);
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "PJRT plugin %s does not export GetPjrtApi: not a PJRT C API plugin",
                          path);
  }
  const tt_pjrt_abi_api_t *api = get_api();
  tt_status_t st = check_api(path, api);
  if (st) {
    dlclose(handle);
    return st;
  }
  tt_pjrt_abi_plugin_initialize_args_t init = {sizeof(init), NULL};
  st = tt_pjrt_plugin_status(api, api->plugin_initialize(&init), "PJRT_Plugin_Initialize");
  if (st) return st; /* the library may have started threads: keep it mapped */
  tt_pjrt_loaded_plugin_t *entry = calloc(1, sizeof(*entry));
  char *copy = strdup(real);
  if (!entry || !copy) {
    free(entry);
    free(copy);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT plugin %s: out of memory", path);
  }
  entry->real_path = copy;
  entry->api = api;
  entry->next = tt_pjrt_plugins;
  tt_pjrt_plugins = entry;
  *out_api = api;
  return NULL;
}

tt_status_t tt_pjrt_plugin_load(const char *path, const tt_pjrt_abi_api_t **out_api) {
  *out_api = NULL;
  if (!path || !*path)
    return tt_status_make(TT_INVALID_ARGUMENT, "PJRT plugin: empty library path");
  pthread_mutex_lock(&tt_pjrt_plugins_lock);
  tt_status_t st = load_locked(path, out_api);
  pthread_mutex_unlock(&tt_pjrt_plugins_lock);
  return st;
}

/* Converts options to the plugin's named values; *out_values is NULL when
 * there are none, else the caller frees it. The strings stay the caller's. */
tt_status_t tt_pjrt_named_values(const char *what, const tt_pjrt_option_t *options,
                                 size_t num_options, tt_pjrt_abi_named_value_t **out_values) {
  *out_values = NULL;
  if (num_options == 0) return NULL;
  tt_pjrt_abi_named_value_t *values = calloc(num_options, sizeof(*values));
  if (!values) return tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT %s options: out of memory", what);
  for (size_t i = 0; i < num_options; i++) {
    const tt_pjrt_option_t *o = &options[i];
    tt_pjrt_abi_named_value_t *v = &values[i];
    if (!o->name || !*o->name) {
      free(values);
      return tt_status_make(TT_INVALID_ARGUMENT, "PJRT %s option %zu has no name", what, i);
    }
    v->struct_size = sizeof(*v);
    v->name = o->name;
    v->name_size = strlen(o->name);
    v->value_size = 1;
    switch (o->kind) {
      case TT_PJRT_OPTION_STRING:
        v->type = TT_PJRT_ABI_VALUE_STRING;
        v->value.string_value = o->string_value ? o->string_value : "";
        v->value_size = strlen(v->value.string_value);
        break;
      case TT_PJRT_OPTION_INT64:
        v->type = TT_PJRT_ABI_VALUE_INT64;
        v->value.int64_value = o->int64_value;
        break;
      case TT_PJRT_OPTION_FLOAT:
        v->type = TT_PJRT_ABI_VALUE_FLOAT;
        v->value.float_value = (float)o->float_value;
        break;
      case TT_PJRT_OPTION_BOOL:
        v->type = TT_PJRT_ABI_VALUE_BOOL;
        v->value.bool_value = o->bool_value != 0;
        break;
      default:
        free(values);
        return tt_status_make(TT_INVALID_ARGUMENT, "PJRT %s option '%s': unknown kind %d",
                              what, o->name, (int)o->kind);
    }
  }
  *out_values = values;
  return NULL;
}
