/* PJRT clients, compilation, buffers and execution over a plugin's table. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/plugin.h"
#include "backends/pjrt/proto.h"
#include "torchtpu/pjrt.h"

typedef struct tt_pjrt_device_entry_s {
  tt_pjrt_abi_device_t *device;
  int id;
  char *kind;
} tt_pjrt_device_entry_t;

struct tt_pjrt_client_s {
  atomic_int refs;
  const tt_pjrt_abi_api_t *api;
  tt_pjrt_abi_client_t *client;
  char *library_path;
  char *platform_name;
  char *platform_version;
  tt_pjrt_device_entry_t *devices; /* addressable devices */
  size_t num_devices;
};

struct tt_pjrt_executable_s {
  tt_pjrt_client_t *client; /* retained */
  tt_pjrt_abi_loaded_exe_t *exe;
  size_t num_outputs;
  int portable;
};

struct tt_pjrt_buffer_s {
  tt_pjrt_client_t *client; /* retained */
  tt_pjrt_abi_buffer_t *buffer;
  tt_dtype_t dtype;
  tt_shape_t shape;
};

/* ---- dtypes ---- */

static int abi_type_of(tt_dtype_t dtype) {
  switch (dtype) {
    case TT_F32: return TT_PJRT_ABI_TYPE_F32;
    case TT_F64: return TT_PJRT_ABI_TYPE_F64;
    case TT_F16: return TT_PJRT_ABI_TYPE_F16;
    case TT_BF16: return TT_PJRT_ABI_TYPE_BF16;
    case TT_I8: return TT_PJRT_ABI_TYPE_S8;
    case TT_U8: return TT_PJRT_ABI_TYPE_U8;
    case TT_I16: return TT_PJRT_ABI_TYPE_S16;
    case TT_I32: return TT_PJRT_ABI_TYPE_S32;
    case TT_I64: return TT_PJRT_ABI_TYPE_S64;
    case TT_BOOL: return TT_PJRT_ABI_TYPE_PRED;
    case TT_C64: return TT_PJRT_ABI_TYPE_C64;
    default: return TT_PJRT_ABI_TYPE_INVALID;
  }
}

static int dtype_of_abi_type(int type, tt_dtype_t *out) {
  for (int d = 0; d < TT_DTYPE_COUNT; d++) {
    if (abi_type_of((tt_dtype_t)d) == type) {
      *out = (tt_dtype_t)d;
      return 1;
    }
  }
  return 0;
}

/* ---- client ---- */

static char *copy_string(const char *s, size_t n) {
  char *out = malloc(n + 1);
  if (!out) return NULL;
  if (n) memcpy(out, s, n);
  out[n] = '\0';
  return out;
}

static void client_free(tt_pjrt_client_t *c) {
  if (c->client) {
    tt_pjrt_abi_client_destroy_args_t args = {sizeof(args), NULL, c->client};
    /* Nothing useful can be done with a failure to shut down. */
    tt_status_free(tt_pjrt_plugin_status(c->api, c->api->client_destroy(&args),
                                         "PJRT_Client_Destroy"));
  }
  for (size_t i = 0; i < c->num_devices; i++) free(c->devices[i].kind);
  free(c->devices);
  free(c->library_path);
  free(c->platform_name);
  free(c->platform_version);
  free(c);
}

static tt_status_t client_string(tt_pjrt_client_t *c, tt_pjrt_abi_client_string_fn *fn,
                                 const char *what, char **out) {
  tt_pjrt_abi_client_string_args_t args = {0};
  args.struct_size = sizeof(args);
  args.client = c->client;
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(c->api, fn(&args), what));
  *out = copy_string(args.text ? args.text : "", args.text ? args.text_size : 0);
  if (!*out) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", what);
  return NULL;
}

static tt_status_t client_list_devices(tt_pjrt_client_t *c) {
  const tt_pjrt_abi_api_t *api = c->api;
  tt_pjrt_abi_client_devices_args_t list = {0};
  list.struct_size = sizeof(list);
  list.client = c->client;
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(api, api->client_addressable_devices(&list),
                                           "PJRT_Client_AddressableDevices"));
  if (list.num_devices == 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "PJRT plugin %s: the client has no addressable "
                          "devices", c->library_path);
  c->devices = calloc(list.num_devices, sizeof(*c->devices));
  if (!c->devices) return tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT devices: out of memory");
  c->num_devices = list.num_devices;
  for (size_t i = 0; i < list.num_devices; i++) {
    tt_pjrt_device_entry_t *d = &c->devices[i];
    d->device = list.devices[i];
    tt_pjrt_abi_device_get_description_args_t desc = {0};
    desc.struct_size = sizeof(desc);
    desc.device = d->device;
    TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(api, api->device_get_description(&desc),
                                             "PJRT_Device_GetDescription"));
    tt_pjrt_abi_device_desc_id_args_t id = {0};
    id.struct_size = sizeof(id);
    id.device_description = desc.device_description;
    TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(api, api->device_description_id(&id),
                                             "PJRT_DeviceDescription_Id"));
    d->id = id.id;
    tt_pjrt_abi_device_desc_string_args_t kind = {0};
    kind.struct_size = sizeof(kind);
    kind.device_description = desc.device_description;
    TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(api, api->device_description_kind(&kind),
                                             "PJRT_DeviceDescription_Kind"));
    d->kind = copy_string(kind.text ? kind.text : "", kind.text ? kind.text_size : 0);
    if (!d->kind) return tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT devices: out of memory");
  }
  return NULL;
}

tt_status_t tt_pjrt_client_create(const char *library_path, const tt_pjrt_option_t *options,
                                  size_t num_options, tt_pjrt_client_t **out_client) {
  *out_client = NULL;
  const tt_pjrt_abi_api_t *api;
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_load(library_path, &api));

  tt_pjrt_abi_named_value_t *values;
  TT_RETURN_IF_ERROR(tt_pjrt_named_values("client", options, num_options, &values));

  tt_pjrt_client_t *c = calloc(1, sizeof(*c));
  char *path_copy = copy_string(library_path, strlen(library_path));
  if (!c || !path_copy) {
    free(c);
    free(path_copy);
    free(values);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT client: out of memory");
  }
  atomic_init(&c->refs, 1);
  c->api = api;
  c->library_path = path_copy;

  tt_pjrt_abi_client_create_args_t create = {0};
  create.struct_size = sizeof(create);
  create.create_options = values;
  create.num_options = num_options;
  tt_status_t st = tt_pjrt_plugin_status(api, api->client_create(&create), "PJRT_Client_Create");
  free(values);
  if (!st) {
    c->client = create.client;
    if (!c->client) st = tt_status_make(TT_INTERNAL, "PJRT_Client_Create returned no client");
  }
  if (!st) st = client_string(c, api->client_platform_name, "PJRT_Client_PlatformName",
                              &c->platform_name);
  if (!st) st = client_string(c, api->client_platform_version, "PJRT_Client_PlatformVersion",
                              &c->platform_version);
  if (!st) st = client_list_devices(c);
  if (st) {
    client_free(c);
    return st;
  }
  *out_client = c;
  return NULL;
}

void tt_pjrt_client_retain(tt_pjrt_client_t *client) { atomic_fetch_add(&client->refs, 1); }

void tt_pjrt_client_release(tt_pjrt_client_t *client) {
  if (client && atomic_fetch_sub(&client->refs, 1) == 1) client_free(client);
}

const char *tt_pjrt_client_library_path(const tt_pjrt_client_t *c) { return c->library_path; }
const char *tt_pjrt_client_platform_name(const tt_pjrt_client_t *c) { return c->platform_name; }
const char *tt_pjrt_client_platform_version(const tt_pjrt_client_t *c) {
  return c->platform_version;
}

void tt_pjrt_client_api_version(const tt_pjrt_client_t *c, int *out_major, int *out_minor) {
  *out_major = c->api->version.major_version;
  *out_minor = c->api->version.minor_version;
}

size_t tt_pjrt_client_device_count(const tt_pjrt_client_t *c) { return c->num_devices; }

static tt_status_t check_device_index(const tt_pjrt_client_t *c, size_t index) {
  if (index >= c->num_devices)
    return tt_status_make(TT_OUT_OF_RANGE, "PJRT device index %zu out of range: the %s client "
                          "has %zu addressable device(s)", index, c->platform_name,
                          c->num_devices);
  return NULL;
}

tt_status_t tt_pjrt_client_device_info(const tt_pjrt_client_t *c, size_t index,
                                       tt_pjrt_device_info_t *out_info) {
  TT_RETURN_IF_ERROR(check_device_index(c, index));
  out_info->id = c->devices[index].id;
  out_info->kind = c->devices[index].kind;
  return NULL;
}

/* ---- compile ---- */

tt_pjrt_compile_config_t tt_pjrt_compile_config_default(void) {
  tt_pjrt_compile_config_t config = {1, 1, -1, 0, 0, NULL};
  return config;
}

static void loaded_exe_destroy(const tt_pjrt_abi_api_t *api, tt_pjrt_abi_loaded_exe_t *exe) {
  tt_pjrt_abi_loaded_exe_destroy_args_t args = {sizeof(args), NULL, exe};
  tt_status_free(tt_pjrt_plugin_status(api, api->loaded_executable_destroy(&args),
                                       "PJRT_LoadedExecutable_Destroy"));
}

static tt_status_t count_outputs(const tt_pjrt_abi_api_t *api, tt_pjrt_abi_loaded_exe_t *exe,
                                 size_t *out) {
  tt_pjrt_abi_loaded_exe_get_executable_args_t get = {0};
  get.struct_size = sizeof(get);
  get.loaded_executable = exe;
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(api, api->loaded_executable_get_executable(&get),
                                           "PJRT_LoadedExecutable_GetExecutable"));
  tt_pjrt_abi_executable_num_outputs_args_t n = {0};
  n.struct_size = sizeof(n);
  n.executable = get.executable;
  tt_status_t st = tt_pjrt_plugin_status(api, api->executable_num_outputs(&n),
                                         "PJRT_Executable_NumOutputs");
  tt_pjrt_abi_executable_destroy_args_t d = {sizeof(d), NULL, get.executable};
  tt_status_free(tt_pjrt_plugin_status(api, api->executable_destroy(&d),
                                       "PJRT_Executable_Destroy"));
  if (!st) *out = n.num_outputs;
  return st;
}

tt_status_t tt_pjrt_compile(tt_pjrt_client_t *client, const char *program, size_t size,
                            const char *format, const tt_pjrt_compile_config_t *config,
                            tt_pjrt_executable_t **out_executable) {
  *out_executable = NULL;
  const tt_pjrt_abi_api_t *api = client->api;
  tt_pjrt_compile_config_t defaults = tt_pjrt_compile_config_default();
  if (!config) config = &defaults;
  if (!program || size == 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "PJRT compile: empty program");
  if (!format || !*format) format = "mlir";
  if (config->device_ordinal >= (int64_t)client->num_devices)
    return tt_status_make(TT_OUT_OF_RANGE, "PJRT compile: device_ordinal %lld out of range: "
                          "the client has %zu addressable device(s)",
                          (long long)config->device_ordinal, client->num_devices);
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
  tt_pjrt_abi_client_compile_args_t args = {0};
  args.struct_size = sizeof(args);
  args.client = client->client;
  args.program = &prog;
  args.compile_options = (const char *)options;
  args.compile_options_size = options_size;
  tt_status_t st = tt_pjrt_plugin_status(api, api->client_compile(&args), "PJRT_Client_Compile");
  free(options);
  if (st) return st;

  size_t num_outputs = 0;
  st = count_outputs(api, args.executable, &num_outputs);
  tt_pjrt_executable_t *e = st ? NULL : calloc(1, sizeof(*e));
  if (!st && !e) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT compile: out of memory");
  if (st) {
    loaded_exe_destroy(api, args.executable);
    return st;
  }
  tt_pjrt_client_retain(client);
  e->client = client;
  e->exe = args.executable;
  e->num_outputs = num_outputs;
  e->portable = config->portable;
  *out_executable = e;
  return NULL;
}

size_t tt_pjrt_executable_num_outputs(const tt_pjrt_executable_t *e) { return e->num_outputs; }
tt_pjrt_client_t *tt_pjrt_executable_client(const tt_pjrt_executable_t *e) { return e->client; }

void tt_pjrt_executable_destroy(tt_pjrt_executable_t *e) {
  if (!e) return;
  loaded_exe_destroy(e->client->api, e->exe);
  tt_pjrt_client_release(e->client);
  free(e);
}

/* ---- buffers ---- */

static void abi_buffer_destroy(const tt_pjrt_abi_api_t *api, tt_pjrt_abi_buffer_t *b) {
  tt_pjrt_abi_buffer_destroy_args_t args = {sizeof(args), NULL, b};
  tt_status_free(tt_pjrt_plugin_status(api, api->buffer_destroy(&args), "PJRT_Buffer_Destroy"));
}

/* Wraps a plugin buffer, reading its element type and dimensions. Takes
 * ownership of `b` (destroyed on failure). */
static tt_status_t wrap_buffer(tt_pjrt_client_t *client, tt_pjrt_abi_buffer_t *b,
                               tt_pjrt_buffer_t **out) {
  const tt_pjrt_abi_api_t *api = client->api;
  tt_pjrt_abi_buffer_element_type_args_t et = {0};
  et.struct_size = sizeof(et);
  et.buffer = b;
  tt_status_t st = tt_pjrt_plugin_status(api, api->buffer_element_type(&et),
                                         "PJRT_Buffer_ElementType");
  tt_pjrt_abi_buffer_dimensions_args_t dims = {0};
  dims.struct_size = sizeof(dims);
  dims.buffer = b;
  if (!st) st = tt_pjrt_plugin_status(api, api->buffer_dimensions(&dims), "PJRT_Buffer_Dimensions");
  tt_dtype_t dtype = TT_F32;
  if (!st && !dtype_of_abi_type(et.type, &dtype))
    st = tt_status_make(TT_UNIMPLEMENTED, "PJRT buffer of element type %d (PJRT numbering) has "
                        "no torchtpu dtype", et.type);
  if (!st && dims.num_dims > TT_MAX_RANK)
    st = tt_status_make(TT_UNIMPLEMENTED, "PJRT buffer of rank %zu exceeds torchtpu's maximum "
                        "rank %d", dims.num_dims, TT_MAX_RANK);
  tt_pjrt_buffer_t *w = st ? NULL : calloc(1, sizeof(*w));
  if (!st && !w) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT buffer: out of memory");
  if (st) {
    abi_buffer_destroy(api, b);
    return st;
  }
  tt_pjrt_client_retain(client);
  w->client = client;
  w->buffer = b;
  w->dtype = dtype;
  w->shape.rank = (int32_t)dims.num_dims;
  for (size_t i = 0; i < dims.num_dims; i++) w->shape.dims[i] = dims.dims[i];
  *out = w;
  return NULL;
}

tt_status_t tt_pjrt_buffer_from_host(tt_pjrt_client_t *client, size_t device_index,
                                     tt_dtype_t dtype, const tt_shape_t *shape,
                                     const void *data, size_t nbytes,
                                     tt_pjrt_buffer_t **out_buffer) {
  *out_buffer = NULL;
  const tt_pjrt_abi_api_t *api = client->api;
  TT_RETURN_IF_ERROR(check_device_index(client, device_index));
  int type = (unsigned)dtype < TT_DTYPE_COUNT ? abi_type_of(dtype) : TT_PJRT_ABI_TYPE_INVALID;
  if (type == TT_PJRT_ABI_TYPE_INVALID)
    return tt_status_make(TT_TYPE_ERROR, "PJRT transfer: unsupported dtype %d", (int)dtype);
  if (shape->rank < 0 || shape->rank > TT_MAX_RANK)
    return tt_status_make(TT_INVALID_ARGUMENT, "PJRT transfer: rank %d out of [0, %d]",
                          (int)shape->rank, TT_MAX_RANK);
  size_t expected = (size_t)tt_shape_numel(shape) * tt_dtype_size(dtype);
  if (nbytes != expected)
    return tt_status_make(TT_INVALID_ARGUMENT, "PJRT transfer: %zu bytes given for a %s tensor "
                          "of %lld elements (%zu bytes)", nbytes, tt_dtype_name(dtype),
                          (long long)tt_shape_numel(shape), expected);
  tt_pjrt_abi_buffer_from_host_args_t args = {0};
  args.struct_size = sizeof(args);
  args.client = client->client;
  args.data = data;
  args.type = type;
  args.dims = shape->dims;
  args.num_dims = (size_t)shape->rank;
  args.host_buffer_semantics = TT_PJRT_ABI_HOST_IMMUTABLE_UNTIL_TRANSFER_COMPLETES;
  args.device = client->devices[device_index].device;
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(api, api->client_buffer_from_host_buffer(&args),
                                           "PJRT_Client_BufferFromHostBuffer"));
  /* The caller's memory may be reused once this returns. */
  tt_status_t st = tt_pjrt_plugin_await(api, args.done_with_host_buffer,
                                        "PJRT_Client_BufferFromHostBuffer (transfer)");
  if (st) {
    abi_buffer_destroy(api, args.buffer);
    return st;
  }
  return wrap_buffer(client, args.buffer, out_buffer);
}

tt_dtype_t tt_pjrt_buffer_dtype(const tt_pjrt_buffer_t *b) { return b->dtype; }
const tt_shape_t *tt_pjrt_buffer_shape(const tt_pjrt_buffer_t *b) { return &b->shape; }
size_t tt_pjrt_buffer_nbytes(const tt_pjrt_buffer_t *b) {
  return (size_t)tt_shape_numel(&b->shape) * tt_dtype_size(b->dtype);
}

tt_status_t tt_pjrt_buffer_to_host(tt_pjrt_buffer_t *b, void *dst, size_t nbytes) {
  const tt_pjrt_abi_api_t *api = b->client->api;
  if (nbytes != tt_pjrt_buffer_nbytes(b))
    return tt_status_make(TT_INVALID_ARGUMENT, "PJRT copy to host: destination of %zu bytes for "
                          "a buffer of %zu bytes", nbytes, tt_pjrt_buffer_nbytes(b));
  if (nbytes == 0) return NULL;
  /* First ask the plugin how many bytes the host copy takes: a plugin whose
   * default host layout is not dense row-major would say so here. */
  tt_pjrt_abi_buffer_to_host_args_t size_query = {0};
  size_query.struct_size = sizeof(size_query);
  size_query.src = b->buffer;
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(api, api->buffer_to_host_buffer(&size_query),
                                           "PJRT_Buffer_ToHostBuffer (size)"));
  if (size_query.dst_size != nbytes)
    return tt_status_make(TT_UNIMPLEMENTED, "PJRT copy to host: the plugin needs %zu bytes for "
                          "a %s buffer of %zu dense bytes (non-dense host layout)",
                          size_query.dst_size, tt_dtype_name(b->dtype), nbytes);
  tt_pjrt_abi_buffer_to_host_args_t args = {0};
  args.struct_size = sizeof(args);
  args.src = b->buffer;
  args.dst = dst;
  args.dst_size = nbytes;
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(api, api->buffer_to_host_buffer(&args),
                                           "PJRT_Buffer_ToHostBuffer"));
  return tt_pjrt_plugin_await(api, args.event, "PJRT_Buffer_ToHostBuffer (transfer)");
}

void tt_pjrt_buffer_destroy(tt_pjrt_buffer_t *b) {
  if (!b) return;
  abi_buffer_destroy(b->client->api, b->buffer);
  tt_pjrt_client_release(b->client);
  free(b);
}

/* ---- execute ---- */

tt_status_t tt_pjrt_execute(tt_pjrt_executable_t *e, size_t device_index,
                            tt_pjrt_buffer_t *const *args, size_t num_args,
                            tt_pjrt_buffer_t **out_outputs) {
  tt_pjrt_client_t *client = e->client;
  const tt_pjrt_abi_api_t *api = client->api;
  TT_RETURN_IF_ERROR(check_device_index(client, device_index));
  if (device_index != 0 && !e->portable)
    return tt_status_make(TT_INVALID_ARGUMENT, "PJRT execute on device %zu: the executable was "
                          "compiled for the default device assignment (device 0); compile it "
                          "portable to run it elsewhere", device_index);
  for (size_t i = 0; i < num_args; i++)
    if (args[i]->client != client)
      return tt_status_make(TT_INVALID_ARGUMENT, "PJRT execute: argument %zu belongs to another "
                            "PJRT client", i);
  size_t n_out = e->num_outputs;
  tt_pjrt_abi_buffer_t **argv = calloc(num_args ? num_args : 1, sizeof(*argv));
  tt_pjrt_abi_buffer_t **outv = calloc(n_out ? n_out : 1, sizeof(*outv));
  if (!argv || !outv) {
    free(argv);
    free(outv);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT execute: out of memory");
  }
  for (size_t i = 0; i < num_args; i++) argv[i] = args[i]->buffer;

  tt_pjrt_abi_execute_options_t options = {0};
  options.struct_size = sizeof(options);
  tt_pjrt_abi_buffer_t *const *arg_lists[1] = {argv};
  tt_pjrt_abi_buffer_t **out_lists[1] = {outv};
  tt_pjrt_abi_event_t *done[1] = {NULL};
  tt_pjrt_abi_execute_args_t ex = {0};
  ex.struct_size = sizeof(ex);
  ex.executable = e->exe;
  ex.options = &options;
  ex.argument_lists = arg_lists;
  ex.num_devices = 1;
  ex.num_args = num_args;
  ex.output_lists = out_lists;
  ex.device_complete_events = done;
  ex.execute_device = e->portable ? client->devices[device_index].device : NULL;
  tt_status_t st = tt_pjrt_plugin_status(api, api->loaded_executable_execute(&ex),
                                         "PJRT_LoadedExecutable_Execute");
  free(argv);
  if (!st) st = tt_pjrt_plugin_await(api, done[0], "PJRT_LoadedExecutable_Execute (completion)");
  size_t wrapped = 0;
  for (size_t i = 0; i < n_out; i++) {
    out_outputs[i] = NULL;
    if (!outv[i]) continue;
    if (st) {
      abi_buffer_destroy(api, outv[i]);
      continue;
    }
    /* wrap_buffer owns outv[i] from here, success or not. */
    st = wrap_buffer(client, outv[i], &out_outputs[i]);
    if (!st) wrapped++;
  }
  if (!st && wrapped != n_out)
    st = tt_status_make(TT_INTERNAL, "PJRT execute: the plugin returned %zu of %zu outputs",
                        wrapped, n_out);
  if (st) {
    for (size_t i = 0; i < n_out; i++) {
      tt_pjrt_buffer_destroy(out_outputs[i]);
      out_outputs[i] = NULL;
    }
  }
  free(outv);
  return st;
}

/* ---- multi-device execution ---- */

tt_status_t tt_pjrt_executable_devices(const tt_pjrt_executable_t *e, size_t *out_indices,
                                       size_t capacity, size_t *out_count) {
  *out_count = 0;
  const tt_pjrt_client_t *client = e->client;
  const tt_pjrt_abi_api_t *api = client->api;
  if (!api->loaded_executable_addressable_devices)
    return tt_status_make(TT_UNIMPLEMENTED, "the plugin %s has no "
                          "PJRT_LoadedExecutable_AddressableDevices", client->library_path);
  tt_pjrt_abi_loaded_exe_addressable_devices_args_t args = {0};
  args.struct_size = sizeof(args);
  args.executable = e->exe;
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_status(api, api->loaded_executable_addressable_devices(&args),
                                           "PJRT_LoadedExecutable_AddressableDevices"));
  for (size_t k = 0; k < args.num_addressable_devices; k++) {
    size_t found = client->num_devices;
    for (size_t i = 0; i < client->num_devices; i++)
      if (client->devices[i].device == args.addressable_devices[k]) found = i;
    if (found == client->num_devices)
      return tt_status_make(TT_INTERNAL, "PJRT executable: addressable device %zu is not one "
                            "of the client's %zu devices", k, client->num_devices);
    if (k < capacity) out_indices[k] = found;
  }
  *out_count = args.num_addressable_devices;
  return NULL;
}

tt_status_t tt_pjrt_execute_devices(tt_pjrt_executable_t *e, size_t num_devices,
                                    tt_pjrt_buffer_t *const *args, size_t num_args,
                                    tt_pjrt_buffer_t **out_outputs) {
  tt_pjrt_client_t *client = e->client;
  const tt_pjrt_abi_api_t *api = client->api;
  size_t have = 0;
  TT_RETURN_IF_ERROR(tt_pjrt_executable_devices(e, NULL, 0, &have));
  if (num_devices == 0 || num_devices != have)
    return tt_status_make(TT_INVALID_ARGUMENT, "PJRT execute: %zu argument lists for an "
                          "executable on %zu devices", num_devices, have);
  for (size_t i = 0; i < num_devices * num_args; i++)
    if (args[i]->client != client)
      return tt_status_make(TT_INVALID_ARGUMENT, "PJRT execute: argument %zu of device %zu "
                            "belongs to another PJRT client", i % num_args, i / num_args);
  size_t n_out = e->num_outputs;
  size_t n_all = num_devices * n_out;
  tt_pjrt_abi_buffer_t **argv = calloc(num_devices * num_args + 1, sizeof(*argv));
  tt_pjrt_abi_buffer_t **outv = calloc(n_all + 1, sizeof(*outv));
  tt_pjrt_abi_buffer_t **arg_lists_m = calloc(num_devices, sizeof(*arg_lists_m));
  tt_pjrt_abi_buffer_t **out_lists_m = calloc(num_devices, sizeof(*out_lists_m));
  tt_pjrt_abi_event_t **done = calloc(num_devices, sizeof(*done));
  const tt_pjrt_abi_buffer_t ***arg_lists = (const tt_pjrt_abi_buffer_t ***)arg_lists_m;
  tt_pjrt_abi_buffer_t ***out_lists = (tt_pjrt_abi_buffer_t ***)out_lists_m;
  tt_status_t st = NULL;
  if (!argv || !outv || !arg_lists_m || !out_lists_m || !done) {
    st = tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT execute: out of memory");
    goto done;
  }
  for (size_t i = 0; i < num_devices * num_args; i++) argv[i] = args[i]->buffer;
  for (size_t d = 0; d < num_devices; d++) {
    arg_lists[d] = (const tt_pjrt_abi_buffer_t **)(argv + d * num_args);
    out_lists[d] = outv + d * n_out;
  }
  tt_pjrt_abi_execute_options_t options = {0};
  options.struct_size = sizeof(options);
  tt_pjrt_abi_execute_args_t ex = {0};
  ex.struct_size = sizeof(ex);
  ex.executable = e->exe;
  ex.options = &options;
  ex.argument_lists = (tt_pjrt_abi_buffer_t *const *const *)arg_lists;
  ex.num_devices = num_devices;
  ex.num_args = num_args;
  ex.output_lists = (tt_pjrt_abi_buffer_t **const *)out_lists;
  ex.device_complete_events = done;
  st = tt_pjrt_plugin_status(api, api->loaded_executable_execute(&ex),
                             "PJRT_LoadedExecutable_Execute");
  /* Every device's event is awaited (and destroyed), even after a failure. */
  for (size_t d = 0; d < num_devices; d++) {
    if (!done[d]) continue;
    tt_status_t est = tt_pjrt_plugin_await(api, done[d], "PJRT_LoadedExecutable_Execute "
                                           "(completion)");
    if (!st) st = est;
    else tt_status_free(est);
  }
  for (size_t i = 0; i < n_all; i++) {
    out_outputs[i] = NULL;
    if (!outv[i]) {
      if (!st) st = tt_status_make(TT_INTERNAL, "PJRT execute: the plugin returned no output "
                                   "%zu for device %zu", i % (n_out ? n_out : 1),
                                   i / (n_out ? n_out : 1));
      continue;
    }
    if (st) {
      abi_buffer_destroy(api, outv[i]);
      continue;
    }
    st = wrap_buffer(client, outv[i], &out_outputs[i]);
  }
  if (st)
    for (size_t i = 0; i < n_all; i++) {
      tt_pjrt_buffer_destroy(out_outputs[i]);
      out_outputs[i] = NULL;
    }
done:
  free(argv);
  free(outv);
  free(arg_lists_m);
  free(out_lists_m);
  free(done);
  return st;
}
