/* The subset of the PJRT C API (the plugin boundary of XLA's runtime) that
 * src/backends/pjrt/ calls, declared here from the published layout so the
 * backend builds without XLA's headers.
 *
 * How the boundary works (the facts these declarations rely on):
 * - A plugin is a shared library exporting `GetPjrtApi`, which returns a
 *   pointer to one table (tt_pjrt_abi_api_t) of function pointers, valid for
 *   the life of the process.
 * - Every call takes one argument struct whose first two words are its size
 *   in bytes (`struct_size`, set by the caller to the size it knows) and an
 *   extension chain (NULL here). Structs and the table only ever grow at the
 *   end within a major version, so a caller that knows fewer fields than the
 *   plugin still works; a plugin refuses a struct smaller than the minimum
 *   it requires, with a message naming the struct.
 * - Every call returns NULL or an error object owned by the caller, which
 *   must be destroyed with the table's error_destroy.
 * - Events (async completion) and every handle the plugin hands out are
 *   owned by the caller and destroyed with the matching *_destroy entry.
 *
 * Only the fields this backend reads or writes are typed; the rest of the
 * table is declared as opaque slots so the offsets line up. The offsets are
 * checked at compile time below. Layout verified against plugins reporting
 * API 0.81, 0.106 and 0.115 (see docs/pjrt.md); the topology and
 * ahead-of-time compile entries (slots 49 and 82..89) against libtpu 0.0.51,
 * API 0.116.
 */
#ifndef TORCHTPU_BACKENDS_PJRT_ABI_H_
#define TORCHTPU_BACKENDS_PJRT_ABI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Opaque plugin-side objects. */
typedef struct tt_pjrt_abi_error_s tt_pjrt_abi_error_t;
typedef struct tt_pjrt_abi_event_s tt_pjrt_abi_event_t;
typedef struct tt_pjrt_abi_client_s tt_pjrt_abi_client_t;
typedef struct tt_pjrt_abi_device_s tt_pjrt_abi_device_t;
typedef struct tt_pjrt_abi_device_desc_s tt_pjrt_abi_device_desc_t;
typedef struct tt_pjrt_abi_executable_s tt_pjrt_abi_executable_t;
typedef struct tt_pjrt_abi_loaded_exe_s tt_pjrt_abi_loaded_exe_t;
typedef struct tt_pjrt_abi_buffer_s tt_pjrt_abi_buffer_t;
typedef struct tt_pjrt_abi_topology_s tt_pjrt_abi_topology_t;
typedef struct tt_pjrt_abi_serialized_exe_s tt_pjrt_abi_serialized_exe_t;

/* The major version this backend speaks; minor versions below the minimum
 * are refused (not verified against anything older). */
#define TT_PJRT_ABI_MAJOR 0
#define TT_PJRT_ABI_MIN_MINOR 81

/* Element types, numbered as on the wire. */
enum {
  TT_PJRT_ABI_TYPE_INVALID = 0,
  TT_PJRT_ABI_TYPE_PRED = 1,
  TT_PJRT_ABI_TYPE_S8 = 2,
  TT_PJRT_ABI_TYPE_S16 = 3,
  TT_PJRT_ABI_TYPE_S32 = 4,
  TT_PJRT_ABI_TYPE_S64 = 5,
  TT_PJRT_ABI_TYPE_U8 = 6,
  TT_PJRT_ABI_TYPE_U16 = 7,
  TT_PJRT_ABI_TYPE_U32 = 8,
  TT_PJRT_ABI_TYPE_U64 = 9,
  TT_PJRT_ABI_TYPE_F16 = 10,
  TT_PJRT_ABI_TYPE_F32 = 11,
  TT_PJRT_ABI_TYPE_F64 = 12,
  TT_PJRT_ABI_TYPE_BF16 = 13,
  TT_PJRT_ABI_TYPE_C64 = 14,
};

/* Host buffer semantics for buffer_from_host_buffer: 1 = the host memory
 * must stay untouched until the returned done event fires. */
enum { TT_PJRT_ABI_HOST_IMMUTABLE_UNTIL_TRANSFER_COMPLETES = 1 };

/* Kinds of a named value (client create options). */
enum {
  TT_PJRT_ABI_VALUE_STRING = 0,
  TT_PJRT_ABI_VALUE_INT64 = 1,
  TT_PJRT_ABI_VALUE_INT64_LIST = 2,
  TT_PJRT_ABI_VALUE_FLOAT = 3,
  TT_PJRT_ABI_VALUE_BOOL = 4,
};

typedef struct tt_pjrt_abi_api_version_s {
  size_t struct_size;
  void *extension_start;
  int major_version;
  int minor_version;
} tt_pjrt_abi_api_version_t;

/* Argument structs. `struct_size` is set to sizeof(the struct). */

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_error_t *error;
} tt_pjrt_abi_error_destroy_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  const tt_pjrt_abi_error_t *error;
  const char *message;  /* out; lives as long as the error */
  size_t message_size;  /* out */
} tt_pjrt_abi_error_message_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  const tt_pjrt_abi_error_t *error;
  int code; /* out; absl status codes: 3 invalid argument, 8 resource
               exhausted, 11 out of range, 12 unimplemented, ... */
} tt_pjrt_abi_error_get_code_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
} tt_pjrt_abi_plugin_initialize_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_event_t *event;
} tt_pjrt_abi_event_args_t; /* both event_destroy and event_await */

typedef struct {
  size_t struct_size;
  void *extension_start;
  const char *name;
  size_t name_size;
  int type; /* TT_PJRT_ABI_VALUE_* (a C enum on the plugin side) */
  union {
    const char *string_value;
    int64_t int64_value;
    const int64_t *int64_array_value;
    float float_value;
    bool bool_value;
  } value;
  size_t value_size; /* elements for strings/lists, 1 for scalars */
} tt_pjrt_abi_named_value_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  const tt_pjrt_abi_named_value_t *create_options;
  size_t num_options;
  void *kv_get_callback;
  void *kv_get_user_arg;
  void *kv_put_callback;
  void *kv_put_user_arg;
  tt_pjrt_abi_client_t *client; /* out */
  void *kv_try_get_callback;
  void *kv_try_get_user_arg;
} tt_pjrt_abi_client_create_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_client_t *client;
} tt_pjrt_abi_client_destroy_args_t;

/* client_platform_name and client_platform_version share this layout. */
typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_client_t *client;
  const char *text;  /* out; owned by the client */
  size_t text_size;  /* out */
} tt_pjrt_abi_client_string_args_t;

/* client_devices and client_addressable_devices share this layout. */
typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_client_t *client;
  tt_pjrt_abi_device_t *const *devices; /* out; owned by the client */
  size_t num_devices;                    /* out */
} tt_pjrt_abi_client_devices_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  char *code;
  size_t code_size;
  const char *format; /* "mlir" (StableHLO text or bytecode) or "hlo" */
  size_t format_size;
} tt_pjrt_abi_program_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_client_t *client;
  const tt_pjrt_abi_program_t *program;
  const char *compile_options; /* serialized xla.CompileOptionsProto */
  size_t compile_options_size;
  tt_pjrt_abi_loaded_exe_t *executable; /* out */
} tt_pjrt_abi_client_compile_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_client_t *client;
  const void *data;
  int type; /* TT_PJRT_ABI_TYPE_* */
  const int64_t *dims;
  size_t num_dims;
  const int64_t *byte_strides; /* NULL: dense, row-major */
  size_t num_byte_strides;
  int host_buffer_semantics;
  tt_pjrt_abi_device_t *device;
  void *memory;        /* NULL: the device's default memory */
  void *device_layout; /* NULL: the plugin's default layout */
  tt_pjrt_abi_event_t *done_with_host_buffer; /* out */
  tt_pjrt_abi_buffer_t *buffer;               /* out */
} tt_pjrt_abi_buffer_from_host_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_device_desc_t *device_description;
  int id; /* out */
} tt_pjrt_abi_device_desc_id_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_device_desc_t *device_description;
  const char *text; /* out; owned by the description */
  size_t text_size; /* out */
} tt_pjrt_abi_device_desc_string_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_device_t *device;
  tt_pjrt_abi_device_desc_t *device_description; /* out; owned by device */
} tt_pjrt_abi_device_get_description_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_executable_t *executable;
} tt_pjrt_abi_executable_destroy_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_executable_t *executable;
  size_t num_outputs; /* out */
} tt_pjrt_abi_executable_num_outputs_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_loaded_exe_t *executable;
} tt_pjrt_abi_loaded_exe_destroy_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_loaded_exe_t *loaded_executable;
  tt_pjrt_abi_executable_t *executable; /* out; caller destroys */
} tt_pjrt_abi_loaded_exe_get_executable_args_t;

/* PJRT_LoadedExecutable_AddressableDevices: the devices an execution with
 * num_devices lists runs on, in argument-list order. */
typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_loaded_exe_t *executable;
  tt_pjrt_abi_device_t *const *addressable_devices; /* out; owned by the executable */
  size_t num_addressable_devices;                   /* out */
} tt_pjrt_abi_loaded_exe_addressable_devices_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  void *send_callbacks;
  void *recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t *non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  void *context;
  const char *call_location;
  size_t num_tasks;
  int *task_ids;
  int64_t *incarnation_ids;
  void *multi_slice_config;
} tt_pjrt_abi_execute_options_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_loaded_exe_t *executable;
  tt_pjrt_abi_execute_options_t *options;
  tt_pjrt_abi_buffer_t *const *const *argument_lists; /* [devices][args] */
  size_t num_devices;
  size_t num_args;
  tt_pjrt_abi_buffer_t **const *output_lists;   /* [devices][outputs], filled */
  tt_pjrt_abi_event_t **device_complete_events; /* [devices], filled */
  tt_pjrt_abi_device_t *execute_device;         /* portable executables only */
} tt_pjrt_abi_execute_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_buffer_t *buffer;
} tt_pjrt_abi_buffer_destroy_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_buffer_t *buffer;
  int type; /* out */
} tt_pjrt_abi_buffer_element_type_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_buffer_t *buffer;
  const int64_t *dims; /* out; owned by the buffer */
  size_t num_dims;     /* out */
} tt_pjrt_abi_buffer_dimensions_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_buffer_t *src;
  void *host_layout; /* NULL: dense row-major */
  void *dst;         /* NULL asks for the size */
  size_t dst_size;   /* in/out */
  tt_pjrt_abi_event_t *event; /* out */
} tt_pjrt_abi_buffer_to_host_args_t;

/* ---- topology descriptions and compiling without a client ----
 * A topology description stands for a set of devices the plugin can compile
 * for (for libtpu e.g. "v5e:2x2": four TPU v5 lite chips), attached or not;
 * PJRT_Compile builds an executable for it that a client on such devices
 * could later load. Neither needs a client. */

typedef struct {
  size_t struct_size;
  void *extension_start;
  const char *topology_name; /* borrowed for the call */
  size_t topology_name_size;
  const tt_pjrt_abi_named_value_t *create_options; /* borrowed for the call */
  size_t num_options;
  tt_pjrt_abi_topology_t *topology; /* out; caller destroys */
} tt_pjrt_abi_topology_create_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_topology_t *topology;
} tt_pjrt_abi_topology_destroy_args_t;

/* topology platform_name and platform_version share this layout. */
typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_topology_t *topology;
  const char *text; /* out; owned by the topology */
  size_t text_size; /* out */
} tt_pjrt_abi_topology_string_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_topology_t *topology;
  tt_pjrt_abi_device_desc_t *const *descriptions; /* out; owned by the topology */
  size_t num_descriptions;                         /* out */
} tt_pjrt_abi_topology_device_descs_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  const tt_pjrt_abi_topology_t *topology;
  const tt_pjrt_abi_program_t *program; /* borrowed for the call */
  const char *compile_options;          /* serialized xla.CompileOptionsProto */
  size_t compile_options_size;
  tt_pjrt_abi_client_t *client;         /* optional; NULL: compile only */
  tt_pjrt_abi_executable_t *executable; /* out; caller destroys */
} tt_pjrt_abi_compile_args_t;

typedef struct {
  size_t struct_size;
  void *extension_start;
  const tt_pjrt_abi_executable_t *executable;
  const char *serialized_bytes; /* out; lives as long as serialized_executable */
  size_t serialized_bytes_size; /* out */
  tt_pjrt_abi_serialized_exe_t *serialized_executable; /* out; backs the bytes */
  /* out; the caller calls it exactly once, on serialized_executable */
  void (*serialized_executable_deleter)(tt_pjrt_abi_serialized_exe_t *);
} tt_pjrt_abi_executable_serialize_args_t;

/* Function pointer types. */
typedef void tt_pjrt_abi_error_destroy_fn(tt_pjrt_abi_error_destroy_args_t *);
typedef void tt_pjrt_abi_error_message_fn(tt_pjrt_abi_error_message_args_t *);
#define TT_PJRT_ABI_FN(name, args_t) typedef tt_pjrt_abi_error_t *name(args_t *)
TT_PJRT_ABI_FN(tt_pjrt_abi_error_get_code_fn, tt_pjrt_abi_error_get_code_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_plugin_initialize_fn, tt_pjrt_abi_plugin_initialize_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_event_fn, tt_pjrt_abi_event_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_client_create_fn, tt_pjrt_abi_client_create_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_client_destroy_fn, tt_pjrt_abi_client_destroy_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_client_string_fn, tt_pjrt_abi_client_string_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_client_devices_fn, tt_pjrt_abi_client_devices_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_client_compile_fn, tt_pjrt_abi_client_compile_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_buffer_from_host_fn, tt_pjrt_abi_buffer_from_host_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_device_desc_id_fn, tt_pjrt_abi_device_desc_id_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_device_desc_string_fn, tt_pjrt_abi_device_desc_string_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_device_get_description_fn, tt_pjrt_abi_device_get_description_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_executable_destroy_fn, tt_pjrt_abi_executable_destroy_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_executable_num_outputs_fn, tt_pjrt_abi_executable_num_outputs_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_loaded_exe_destroy_fn, tt_pjrt_abi_loaded_exe_destroy_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_loaded_exe_get_executable_fn,
               tt_pjrt_abi_loaded_exe_get_executable_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_loaded_exe_addressable_devices_fn,
               tt_pjrt_abi_loaded_exe_addressable_devices_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_execute_fn, tt_pjrt_abi_execute_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_buffer_destroy_fn, tt_pjrt_abi_buffer_destroy_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_buffer_element_type_fn, tt_pjrt_abi_buffer_element_type_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_buffer_dimensions_fn, tt_pjrt_abi_buffer_dimensions_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_buffer_to_host_fn, tt_pjrt_abi_buffer_to_host_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_topology_create_fn, tt_pjrt_abi_topology_create_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_topology_destroy_fn, tt_pjrt_abi_topology_destroy_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_topology_string_fn, tt_pjrt_abi_topology_string_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_topology_device_descs_fn, tt_pjrt_abi_topology_device_descs_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_compile_fn, tt_pjrt_abi_compile_args_t);
TT_PJRT_ABI_FN(tt_pjrt_abi_executable_serialize_fn, tt_pjrt_abi_executable_serialize_args_t);
#undef TT_PJRT_ABI_FN

/* A slot this backend never calls. */
typedef void (*tt_pjrt_abi_unused_fn)(void);

/* The function table, in the plugin's slot order, up to the last slot this
 * backend calls (PJRT_Compile, slot 89; every table of API 0.81 or newer
 * reaches it). The plugin's table is at least this long when its
 * struct_size says so; tt_pjrt loader checks that. */
typedef struct tt_pjrt_abi_api_s {
  size_t struct_size;
  void *extension_start;
  tt_pjrt_abi_api_version_t version;

  tt_pjrt_abi_error_destroy_fn *error_destroy;            /* slot 0 */
  tt_pjrt_abi_error_message_fn *error_message;            /* 1 */
  tt_pjrt_abi_error_get_code_fn *error_get_code;          /* 2 */
  tt_pjrt_abi_plugin_initialize_fn *plugin_initialize;    /* 3 */
  tt_pjrt_abi_unused_fn plugin_attributes;                /* 4 */
  tt_pjrt_abi_event_fn *event_destroy;                    /* 5 */
  tt_pjrt_abi_unused_fn event_is_ready;                   /* 6 */
  tt_pjrt_abi_unused_fn event_error;                      /* 7 */
  tt_pjrt_abi_event_fn *event_await;                      /* 8 */
  tt_pjrt_abi_unused_fn event_on_ready;                   /* 9 */
  tt_pjrt_abi_client_create_fn *client_create;            /* 10 */
  tt_pjrt_abi_client_destroy_fn *client_destroy;          /* 11 */
  tt_pjrt_abi_client_string_fn *client_platform_name;     /* 12 */
  tt_pjrt_abi_unused_fn client_process_index;             /* 13 */
  tt_pjrt_abi_client_string_fn *client_platform_version;  /* 14 */
  tt_pjrt_abi_client_devices_fn *client_devices;          /* 15 */
  tt_pjrt_abi_client_devices_fn *client_addressable_devices; /* 16 */
  tt_pjrt_abi_unused_fn client_lookup_device;             /* 17 */
  tt_pjrt_abi_unused_fn client_lookup_addressable_device; /* 18 */
  tt_pjrt_abi_unused_fn client_addressable_memories;      /* 19 */
  tt_pjrt_abi_client_compile_fn *client_compile;          /* 20 */
  tt_pjrt_abi_unused_fn client_default_device_assignment; /* 21 */
  tt_pjrt_abi_buffer_from_host_fn *client_buffer_from_host_buffer; /* 22 */
  tt_pjrt_abi_device_desc_id_fn *device_description_id;  /* 23 */
  tt_pjrt_abi_unused_fn device_description_process_index; /* 24 */
  tt_pjrt_abi_unused_fn device_description_attributes;   /* 25 */
  tt_pjrt_abi_device_desc_string_fn *device_description_kind; /* 26 */
  tt_pjrt_abi_unused_fn device_description_debug_string; /* 27 */
  tt_pjrt_abi_unused_fn device_description_to_string;    /* 28 */
  tt_pjrt_abi_device_get_description_fn *device_get_description; /* 29 */
  tt_pjrt_abi_unused_fn device_slots_30_to_39[10];        /* 30..39: device
                                     addressability/memories, memory queries */
  tt_pjrt_abi_executable_destroy_fn *executable_destroy;  /* 40 */
  tt_pjrt_abi_unused_fn executable_name;                  /* 41 */
  tt_pjrt_abi_unused_fn executable_num_replicas;          /* 42 */
  tt_pjrt_abi_unused_fn executable_num_partitions;        /* 43 */
  tt_pjrt_abi_executable_num_outputs_fn *executable_num_outputs; /* 44 */
  tt_pjrt_abi_unused_fn executable_slots_45_to_48[4];     /* 45..48 */
  tt_pjrt_abi_executable_serialize_fn *executable_serialize; /* 49 */
  tt_pjrt_abi_loaded_exe_destroy_fn *loaded_executable_destroy; /* 50 */
  tt_pjrt_abi_loaded_exe_get_executable_fn *loaded_executable_get_executable; /* 51 */
  tt_pjrt_abi_loaded_exe_addressable_devices_fn *loaded_executable_addressable_devices; /* 52 */
  tt_pjrt_abi_unused_fn loaded_executable_slots_53_to_54[2]; /* 53..54 */
  tt_pjrt_abi_execute_fn *loaded_executable_execute;      /* 55 */
  tt_pjrt_abi_unused_fn loaded_executable_slots_56_to_57[2]; /* 56..57 */
  tt_pjrt_abi_buffer_destroy_fn *buffer_destroy;          /* 58 */
  tt_pjrt_abi_buffer_element_type_fn *buffer_element_type; /* 59 */
  tt_pjrt_abi_buffer_dimensions_fn *buffer_dimensions;    /* 60 */
  tt_pjrt_abi_unused_fn buffer_slots_61_to_69[9];         /* 61..69 */
  tt_pjrt_abi_buffer_to_host_fn *buffer_to_host_buffer;   /* 70 */
  tt_pjrt_abi_unused_fn buffer_and_stream_slots_71_to_81[11]; /* 71..81: buffer
                                     queries, copy-to-device streams */
  tt_pjrt_abi_topology_create_fn *topology_create;        /* 82 */
  tt_pjrt_abi_topology_destroy_fn *topology_destroy;      /* 83 */
  tt_pjrt_abi_topology_string_fn *topology_platform_name; /* 84 */
  tt_pjrt_abi_topology_string_fn *topology_platform_version; /* 85 */
  tt_pjrt_abi_topology_device_descs_fn *topology_get_device_descriptions; /* 86 */
  tt_pjrt_abi_unused_fn topology_slots_87_to_88[2];       /* 87..88: serialize,
                                     attributes */
  tt_pjrt_abi_compile_fn *compile;                        /* 89 */
} tt_pjrt_abi_api_t;

/* The slot offsets are the contract: header (40 bytes) + 8 bytes a slot. */
#define TT_PJRT_ABI_SLOT_OFFSET(n) (offsetof(tt_pjrt_abi_api_t, error_destroy) + (n) * sizeof(void *))
_Static_assert(offsetof(tt_pjrt_abi_api_t, error_destroy) == 40, "PJRT table header");
_Static_assert(offsetof(tt_pjrt_abi_api_t, client_create) == TT_PJRT_ABI_SLOT_OFFSET(10), "slot 10");
_Static_assert(offsetof(tt_pjrt_abi_api_t, client_compile) == TT_PJRT_ABI_SLOT_OFFSET(20), "slot 20");
_Static_assert(offsetof(tt_pjrt_abi_api_t, device_get_description) == TT_PJRT_ABI_SLOT_OFFSET(29), "slot 29");
_Static_assert(offsetof(tt_pjrt_abi_api_t, executable_destroy) == TT_PJRT_ABI_SLOT_OFFSET(40), "slot 40");
_Static_assert(offsetof(tt_pjrt_abi_api_t, loaded_executable_destroy) == TT_PJRT_ABI_SLOT_OFFSET(50), "slot 50");
_Static_assert(offsetof(tt_pjrt_abi_api_t, loaded_executable_addressable_devices) == TT_PJRT_ABI_SLOT_OFFSET(52), "slot 52");
_Static_assert(offsetof(tt_pjrt_abi_api_t, loaded_executable_execute) == TT_PJRT_ABI_SLOT_OFFSET(55), "slot 55");
_Static_assert(offsetof(tt_pjrt_abi_api_t, buffer_destroy) == TT_PJRT_ABI_SLOT_OFFSET(58), "slot 58");
_Static_assert(offsetof(tt_pjrt_abi_api_t, buffer_to_host_buffer) == TT_PJRT_ABI_SLOT_OFFSET(70), "slot 70");
_Static_assert(offsetof(tt_pjrt_abi_api_t, executable_serialize) == TT_PJRT_ABI_SLOT_OFFSET(49), "slot 49");
_Static_assert(offsetof(tt_pjrt_abi_api_t, topology_create) == TT_PJRT_ABI_SLOT_OFFSET(82), "slot 82");
_Static_assert(offsetof(tt_pjrt_abi_api_t, topology_get_device_descriptions) == TT_PJRT_ABI_SLOT_OFFSET(86), "slot 86");
_Static_assert(offsetof(tt_pjrt_abi_api_t, compile) == TT_PJRT_ABI_SLOT_OFFSET(89), "slot 89");
_Static_assert(sizeof(tt_pjrt_abi_api_t) == TT_PJRT_ABI_SLOT_OFFSET(90), "table size");
/* A few argument layouts whose offsets are easy to get wrong. */
_Static_assert(offsetof(tt_pjrt_abi_named_value_t, value) == 40, "named value union");
_Static_assert(sizeof(tt_pjrt_abi_named_value_t) == 56, "named value size");
_Static_assert(offsetof(tt_pjrt_abi_client_create_args_t, client) == 64, "create args");
_Static_assert(offsetof(tt_pjrt_abi_buffer_from_host_args_t, buffer) == 112, "from-host args");
_Static_assert(offsetof(tt_pjrt_abi_execute_options_t, launch_id) == 48, "execute options");
_Static_assert(offsetof(tt_pjrt_abi_execute_args_t, execute_device) == 72, "execute args");
_Static_assert(offsetof(tt_pjrt_abi_topology_create_args_t, topology) == 48, "topology args");
_Static_assert(offsetof(tt_pjrt_abi_compile_args_t, executable) == 56, "compile args");
_Static_assert(offsetof(tt_pjrt_abi_executable_serialize_args_t, serialized_executable_deleter) == 48,
               "serialize args");

#endif /* TORCHTPU_BACKENDS_PJRT_ABI_H_ */
