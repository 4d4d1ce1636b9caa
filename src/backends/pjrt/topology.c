/* Ahead-of-time compile for a plugin's topology description: no client, no
 * devices. PJRT_TopologyDescription_Create names the devices to compile for,
 * PJRT_Compile builds an executable for them, PJRT_Executable_Serialize
 * turns it into bytes. See include/torchtpu/pjrt.h and docs/pjrt.md. */
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/plugin.h"
#include "backends/pjrt/proto.h"
#include "torchtpu/pjrt.h"

struct tt_pjrt_topology_s {
  const tt_pjrt_abi_api_t *api;
  tt_pjrt_abi_topology_t *topology;
  char *library_path;
  char *name;
  char *platform_name;
  char *platform_version;
  char **device_kinds; /* one per device description */
  size_t num_devices;
};

static char *copy_text(const char *s, size_t n) {
  char *out = malloc(n + 1);
  if (!out) return NULL;
  if (n) memcpy(out, s, n);
  out[n] = '\0';
  return out;
}

/* The entries an ahead-of-time compile calls beyond the loader's own
 * checks: a plugin may leave them NULL (it compiles only with a client). */
static tt_status_t check_topology_entries(const char *path, const tt_pjrt_abi_api_t *api) {
  static const char *const names[] = {
      "PJRT_TopologyDescription_Create", "PJRT_TopologyDescription_Destroy",
      "PJRT_TopologyDescription_PlatformName", "PJRT_TopologyDescription_PlatformVersion",
      "PJRT_TopologyDescription_GetDeviceDescriptions", "PJRT_Compile",
      "PJRT_Executable_Serialize",
  };
  const void *entries[] = {
      (const void *)api->topology_create, (const void *)api->topology_destroy,
      (const void *)api->topology_platform_name, (const void *)api->topology_platform_version,
      (const void *)api->topology_get_device_descriptions, (const void *)api->compile,
      (const void *)api->executable_serialize,
  };
  for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++)
    if (!entries[i])
      return tt_status_make(TT_UNIMPLEMENTED,
                            "PJRT plugin %s (API %d.%d) does not implement %s: it cannot "
                            "compile ahead of time for a topology",
                            path, api->version.major_version, api->version.minor_version,
                            names[i]);
  return NULL;
}

static tt_status_t topology_string(tt_pjrt_topology_t *t, tt_pjrt_abi_topology_string_fn *fn,
                                   const char *what, char **out) {
  tt_pjrt_abi_topology_string_args_t args = {0};
  args.struct_size = sizeof(args);
  args.topology = t->topology;
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(t->api, fn(&args), what));
  *out = copy_text(args.text ? args.text : "", args.text ? args.text_size : 0);
  if (!*out) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", what);
  return NULL;
}

static tt_status_t topology_list_devices(tt_pjrt_topology_t *t) {
  const tt_pjrt_abi_api_t *api = t->api;
  tt_pjrt_abi_topology_device_descs_args_t list = {0};
  list.struct_size = sizeof(list);
  list.topology = t->topology;
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(api, api->topology_get_device_descriptions(&list),
                                           "PJRT_TopologyDescription_GetDeviceDescriptions"));
  if (list.num_descriptions == 0) return NULL;
  t->device_kinds = calloc(list.num_descriptions, sizeof(*t->device_kinds));
  if (!t->device_kinds)
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT topology devices: out of memory");
  t->num_devices = list.num_descriptions;
  for (size_t i = 0; i < list.num_descriptions; i++) {
    tt_pjrt_abi_device_desc_string_args_t kind = {0};
    kind.struct_size = sizeof(kind);
    kind.device_description = list.descriptions[i];
    TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(api, api->device_description_kind(&kind),
                                             "PJRT_DeviceDescription_Kind"));
    t->device_kinds[i] = copy_text(kind.text ? kind.text : "", kind.text ? kind.text_size : 0);
    if (!t->device_kinds[i])
      return tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT topology devices: out of memory");
  }
  return NULL;
}

void tt_pjrt_topology_destroy(tt_pjrt_topology_t *t) {
  if (!t) return;
  if (t->topology) {
    tt_pjrt_abi_topology_destroy_args_t args = {sizeof(args), NULL, t->topology};
    /* Nothing useful can be done with a failure to free. */
    tt_status_free(tt_pjrt_plugin_status(t->api, t->api->topology_destroy(&args),
                                         "PJRT_TopologyDescription_Destroy"));
  }
  for (size_t i = 0; i < t->num_devices; i++) free(t->device_kinds[i]);
  free(t->device_kinds);
  free(t->library_path);
  free(t->name);
  free(t->platform_name);
  free(t->platform_version);
  free(t);
}

tt_status_t tt_pjrt_topology_create(const char *library_path, const char *topology_name,
                                    const tt_pjrt_option_t *options, size_t num_options,
                                    tt_pjrt_topology_t **out_topology) {
  *out_topology = NULL;
  if (!topology_name) topology_name = "";
  const tt_pjrt_abi_api_t *api;
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_load(library_path, &api));
  TT_RETURN_IF_ERROR(check_topology_entries(library_path, api));
  tt_pjrt_abi_named_value_t *values;
  TT_RETURN_IF_ERROR(tt_pjrt_named_values("topology", options, num_options, &values));

  tt_pjrt_topology_t *t = calloc(1, sizeof(*t));
  if (t) {
    t->api = api;
    t->library_path = copy_text(library_path, strlen(library_path));
    t->name = copy_text(topology_name, strlen(topology_name));
  }
  if (!t || !t->library_path || !t->name) {
    free(values);
    tt_pjrt_topology_destroy(t);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT topology: out of memory");
  }
  tt_pjrt_abi_topology_create_args_t create = {0};
  create.struct_size = sizeof(create);
  create.topology_name = topology_name;
  create.topology_name_size = strlen(topology_name);
  create.create_options = values;
  create.num_options = num_options;
  tt_status_t st = tt_pjrt_plugin_status(api, api->topology_create(&create),
                                         "PJRT_TopologyDescription_Create");
  free(values);
  if (st) {
    tt_status_t named = tt_status_make(tt_status_code(st),
                                       "PJRT plugin %s refused topology '%s': %s", library_path,
                                       topology_name, tt_status_message(st));
    tt_status_free(st);
    tt_pjrt_topology_destroy(t);
    return named;
  }
  t->topology = create.topology;
  if (!t->topology)
    st = tt_status_make(TT_INTERNAL, "PJRT_TopologyDescription_Create returned no topology");
  if (!st) st = topology_string(t, api->topology_platform_name,
                                "PJRT_TopologyDescription_PlatformName", &t->platform_name);
  if (!st) st = topology_string(t, api->topology_platform_version,
                                "PJRT_TopologyDescription_PlatformVersion", &t->platform_version);
  if (!st) st = topology_list_devices(t);
  if (st) {
    tt_pjrt_topology_destroy(t);
    return st;
  }
  *out_topology = t;
  return NULL;
}

const char *tt_pjrt_topology_name(const tt_pjrt_topology_t *t) { return t->name; }
const char *tt_pjrt_topology_library_path(const tt_pjrt_topology_t *t) { return t->library_path; }
const char *tt_pjrt_topology_platform_name(const tt_pjrt_topology_t *t) { return t->platform_name; }
const char *tt_pjrt_topology_platform_version(const tt_pjrt_topology_t *t) {
  return t->platform_version;
}

void tt_pjrt_topology_api_version(const tt_pjrt_topology_t *t, int *out_major, int *out_minor) {
  *out_major = t->api->version.major_version;
  *out_minor = t->api->version.minor_version;
}

size_t tt_pjrt_topology_device_count(const tt_pjrt_topology_t *t) { return t->num_devices; }

tt_status_t tt_pjrt_topology_device_kind(const tt_pjrt_topology_t *t, size_t index,
                                         const char **out_kind) {
  *out_kind = NULL;
  if (index >= t->num_devices)
    return tt_status_make(TT_OUT_OF_RANGE, "PJRT topology '%s': device index %zu out of range "
                          "(%zu device(s))", t->name, index, t->num_devices);
  *out_kind = t->device_kinds[index];
  return NULL;
}

/* Serializes `exe` into a malloc'ed copy the caller owns. */
static tt_status_t serialize_executable(const tt_pjrt_abi_api_t *api,
                                        tt_pjrt_abi_executable_t *exe, uint8_t **out_bytes,
                                        size_t *out_size) {
  tt_pjrt_abi_executable_serialize_args_t ser = {0};
  ser.struct_size = sizeof(ser);
  ser.executable = exe;
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(api, api->executable_serialize(&ser),
                                           "PJRT_Executable_Serialize"));
  tt_status_t st = NULL;
  if (!ser.serialized_bytes || ser.serialized_bytes_size == 0) {
    st = tt_status_make(TT_INTERNAL, "PJRT_Executable_Serialize returned no bytes");
  } else {
    *out_bytes = malloc(ser.serialized_bytes_size);
    if (*out_bytes) {
      memcpy(*out_bytes, ser.serialized_bytes, ser.serialized_bytes_size);
      *out_size = ser.serialized_bytes_size;
    } else {
      st = tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT_Executable_Serialize: out of memory for "
                          "%zu bytes", ser.serialized_bytes_size);
    }
  }
  if (ser.serialized_executable_deleter)
    ser.serialized_executable_deleter(ser.serialized_executable);
  return st;
}

tt_status_t tt_pjrt_topology_compile(tt_pjrt_topology_t *t, const char *program, size_t size,
                                     const char *format, const tt_pjrt_compile_config_t *config,
                                     uint8_t **out_bytes, size_t *out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  const tt_pjrt_abi_api_t *api = t->api;
  tt_pjrt_compile_config_t defaults = tt_pjrt_compile_config_default();
  if (!config) config = &defaults;
  if (!program || size == 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "PJRT compile for topology '%s': empty program",
                          t->name);
  if (!format || !*format) format = "mlir";
  uint8_t *options;
  size_t options_size;
  TT_RETURN_IF_ERROR(tt_pjrt_compile_options_encode(config, &options, &options_size));

  tt_pjrt_abi_program_t prog = {0};
  prog.struct_size = sizeof(prog);
  /* The plugin only reads `code` when compiling. */
  prog.code = (char *)program;
  prog.code_size = size;
  prog.format = format;
  prog.format_size = strlen(format);
  tt_pjrt_abi_compile_args_t args = {0};
  args.struct_size = sizeof(args);
  args.topology = t->topology;
  args.program = &prog;
  args.compile_options = (const char *)options;
  args.compile_options_size = options_size;
  tt_status_t st = tt_pjrt_plugin_status(api, api->compile(&args), "PJRT_Compile");
  free(options);
  if (st) {
    tt_status_t named = tt_status_make(
        tt_status_code(st), "compile for topology '%s' (%zu x %s): %s", t->name, t->num_devices,
        t->num_devices ? t->device_kinds[0] : "no devices", tt_status_message(st));
    tt_status_free(st);
    return named;
  }
  if (!args.executable) return tt_status_make(TT_INTERNAL, "PJRT_Compile returned no executable");
  st = serialize_executable(api, args.executable, out_bytes, out_size);
  tt_pjrt_abi_executable_destroy_args_t d = {sizeof(d), NULL, args.executable};
  tt_status_free(tt_pjrt_plugin_status(api, api->executable_destroy(&d),
                                       "PJRT_Executable_Destroy"));
  return st;
}
