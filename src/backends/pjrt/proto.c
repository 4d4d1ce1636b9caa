/* Protocol-buffer wire-format writer for the PJRT compile options. */
#include "backends/pjrt/proto.h"

#include <string.h>

enum { TT_PROTO_WIRE_VARINT = 0, TT_PROTO_WIRE_LEN = 2 };

void tt_proto_writer_init(tt_proto_writer_t *w) { memset(w, 0, sizeof(*w)); }

void tt_proto_writer_release(tt_proto_writer_t *w) { tt_strbuf_release(&w->bytes); }

tt_status_t tt_proto_writer_status(const tt_proto_writer_t *w) {
  if (w->bytes.failed)
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "protobuf writer: out of memory");
  return NULL;
}

static void append(tt_proto_writer_t *w, const void *bytes, size_t n) {
  if (n) tt_strbuf_put(&w->bytes, bytes, n);
}

void tt_proto_write_varint(tt_proto_writer_t *w, uint64_t value) {
  uint8_t bytes[10];
  size_t n = 0;
  do {
    uint8_t low = value & 0x7f;
    value >>= 7;
    bytes[n++] = low | (value ? 0x80 : 0);
  } while (value);
  append(w, bytes, n);
}

static void write_key(tt_proto_writer_t *w, uint32_t field, int wire_type) {
  tt_proto_write_varint(w, ((uint64_t)field << 3) | (uint64_t)wire_type);
}

void tt_proto_write_int64_field(tt_proto_writer_t *w, uint32_t field, int64_t value) {
  write_key(w, field, TT_PROTO_WIRE_VARINT);
  tt_proto_write_varint(w, (uint64_t)value);
}

void tt_proto_write_bool_field(tt_proto_writer_t *w, uint32_t field, int value) {
  write_key(w, field, TT_PROTO_WIRE_VARINT);
  tt_proto_write_varint(w, value ? 1 : 0);
}

void tt_proto_write_bytes_field(tt_proto_writer_t *w, uint32_t field, const void *bytes,
                                size_t size) {
  write_key(w, field, TT_PROTO_WIRE_LEN);
  tt_proto_write_varint(w, size);
  append(w, bytes, size);
}

void tt_proto_write_message_field(tt_proto_writer_t *w, uint32_t field,
                                  const tt_proto_writer_t *message) {
  if (message->bytes.failed) w->bytes.failed = 1;
  tt_proto_write_bytes_field(w, field, message->bytes.data, message->bytes.len);
}

/* Field numbers of xla.CompileOptionsProto and its
 * xla.ExecutableBuildOptionsProto (xla/pjrt/proto/compile_options.proto). */
enum {
  TT_COMPILE_OPTIONS_EXECUTABLE_BUILD_OPTIONS = 3,
  TT_COMPILE_OPTIONS_COMPILE_PORTABLE_EXECUTABLE = 4,
  TT_BUILD_OPTIONS_DEVICE_ORDINAL = 1,
  TT_BUILD_OPTIONS_NUM_REPLICAS = 4,
  TT_BUILD_OPTIONS_NUM_PARTITIONS = 5,
  TT_BUILD_OPTIONS_USE_SPMD_PARTITIONING = 6,
  TT_BUILD_OPTIONS_DEVICE_ASSIGNMENT = 9,
  /* xla.DeviceAssignmentProto (xla/xla_data.proto) */
  TT_DEVICE_ASSIGNMENT_REPLICA_COUNT = 1,
  TT_DEVICE_ASSIGNMENT_COMPUTATION_COUNT = 2,
  TT_DEVICE_ASSIGNMENT_COMPUTATION_DEVICES = 3,
  TT_COMPUTATION_DEVICE_REPLICA_DEVICE_IDS = 1,
};

/* DeviceAssignmentProto: one ComputationDevice per partition, listing the
 * device of each replica (ids unpacked: parsers read packed and unpacked
 * repeated fields alike). */
static void write_device_assignment(tt_proto_writer_t *w, const tt_pjrt_compile_config_t *c) {
  tt_proto_writer_t da;
  tt_proto_writer_init(&da);
  tt_proto_write_int64_field(&da, TT_DEVICE_ASSIGNMENT_REPLICA_COUNT, c->num_replicas);
  tt_proto_write_int64_field(&da, TT_DEVICE_ASSIGNMENT_COMPUTATION_COUNT, c->num_partitions);
  for (int64_t p = 0; p < c->num_partitions; p++) {
    tt_proto_writer_t cd;
    tt_proto_writer_init(&cd);
    for (int64_t r = 0; r < c->num_replicas; r++)
      tt_proto_write_int64_field(&cd, TT_COMPUTATION_DEVICE_REPLICA_DEVICE_IDS,
                                 c->device_assignment[r * c->num_partitions + p]);
    tt_proto_write_message_field(&da, TT_DEVICE_ASSIGNMENT_COMPUTATION_DEVICES, &cd);
    tt_proto_writer_release(&cd);
  }
  tt_proto_write_message_field(w, TT_BUILD_OPTIONS_DEVICE_ASSIGNMENT, &da);
  tt_proto_writer_release(&da);
}

tt_status_t tt_pjrt_compile_options_encode(const tt_pjrt_compile_config_t *config,
                                           uint8_t **out_bytes, size_t *out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  if (config->num_replicas < 1 || config->num_partitions < 1)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "PJRT compile options: num_replicas (%lld) and num_partitions (%lld) "
                          "must be at least 1",
                          (long long)config->num_replicas, (long long)config->num_partitions);
  if (config->device_ordinal < -1)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "PJRT compile options: device_ordinal must be -1 (any) or a device "
                          "index, got %lld",
                          (long long)config->device_ordinal);
  if (config->device_assignment) {
    int64_t n = config->num_replicas * config->num_partitions;
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k <= i; k++)
        if (config->device_assignment[i] < 0 ||
            (k < i && config->device_assignment[k] == config->device_assignment[i]))
          return tt_status_make(TT_INVALID_ARGUMENT,
                                "PJRT compile options: device assignment entry %lld is device "
                                "%lld (ids must be distinct and >= 0)",
                                (long long)i, (long long)config->device_assignment[i]);
  }
  tt_proto_writer_t build, options;
  tt_proto_writer_init(&build);
  tt_proto_writer_init(&options);
  /* Written even when they equal proto3 defaults, so the message is never
   * empty and says exactly what was asked. */
  tt_proto_write_int64_field(&build, TT_BUILD_OPTIONS_DEVICE_ORDINAL, config->device_ordinal);
  tt_proto_write_int64_field(&build, TT_BUILD_OPTIONS_NUM_REPLICAS, config->num_replicas);
  tt_proto_write_int64_field(&build, TT_BUILD_OPTIONS_NUM_PARTITIONS, config->num_partitions);
  if (config->use_spmd_partitioning)
    tt_proto_write_bool_field(&build, TT_BUILD_OPTIONS_USE_SPMD_PARTITIONING, 1);
  if (config->device_assignment) write_device_assignment(&build, config);
  tt_proto_write_message_field(&options, TT_COMPILE_OPTIONS_EXECUTABLE_BUILD_OPTIONS, &build);
  if (config->portable)
    tt_proto_write_bool_field(&options, TT_COMPILE_OPTIONS_COMPILE_PORTABLE_EXECUTABLE, 1);
  tt_proto_writer_release(&build);
  tt_status_t st = tt_proto_writer_status(&options);
  if (st) {
    tt_proto_writer_release(&options);
    return st;
  }
  *out_size = options.bytes.len;
  *out_bytes = (uint8_t *)tt_strbuf_take(&options.bytes); /* ownership moves to the caller */
  return NULL;
}
