/* A tiny protocol-buffer writer: just enough wire format (varints and
 * length-delimited fields) to serialize the few fields of
 * xla.CompileOptionsProto that the PJRT backend sets, without a protobuf
 * dependency.
 *
 * Wire format facts used: a field is a key varint (field_number << 3 |
 * wire_type) followed by its payload; wire type 0 is a varint (int64 and bool
 * values; a negative int64 is its two's complement, ten bytes), wire type 2
 * is a varint length followed by that many bytes (strings, bytes, nested
 * messages).
 */
#ifndef TORCHTPU_BACKENDS_PJRT_PROTO_H_
#define TORCHTPU_BACKENDS_PJRT_PROTO_H_

#include <stddef.h>
#include <stdint.h>

#include "torchtpu/base.h"
#include "torchtpu/pjrt.h"

/* A growing byte buffer (the engine's tt_strbuf_t: bytes.data, bytes.len).
 * Zero-initialise (or tt_proto_writer_init), write, check
 * tt_proto_writer_status once at the end, then release. An allocation
 * failure makes every later write a no-op and the status an error. */
typedef struct tt_proto_writer_s {
  tt_strbuf_t bytes;
} tt_proto_writer_t;

void tt_proto_writer_init(tt_proto_writer_t *w);
/* Frees the bytes; the writer may be reused after tt_proto_writer_init. */
void tt_proto_writer_release(tt_proto_writer_t *w);
/* NULL, or TT_RESOURCE_EXHAUSTED if a write could not allocate. */
tt_status_t tt_proto_writer_status(const tt_proto_writer_t *w);

/* The raw varint encoding of value (no key). */
void tt_proto_write_varint(tt_proto_writer_t *w, uint64_t value);
/* An int64/uint64/enum field (wire type 0). */
void tt_proto_write_int64_field(tt_proto_writer_t *w, uint32_t field, int64_t value);
/* A bool field (wire type 0, payload 0 or 1). */
void tt_proto_write_bool_field(tt_proto_writer_t *w, uint32_t field, int value);
/* A bytes/string field (wire type 2). */
void tt_proto_write_bytes_field(tt_proto_writer_t *w, uint32_t field, const void *bytes,
                                size_t size);
/* A nested message field: the bytes another writer produced. */
void tt_proto_write_message_field(tt_proto_writer_t *w, uint32_t field,
                                  const tt_proto_writer_t *message);

/* Serialises `config` as an xla.CompileOptionsProto:
 *   executable_build_options (3) { device_ordinal (1), num_replicas (4),
 *                                  num_partitions (5),
 *                                  use_spmd_partitioning (6), only when set,
 *                                  device_assignment (9), only when given:
 *                                    { replica_count (1), computation_count (2),
 *                                      computation_devices (3) per partition
 *                                        { replica_device_ids (1) per replica } } }
 *   compile_portable_executable (4), only when set.
 * Every field is written explicitly, so the result is never empty. On
 * success *out_bytes is malloc'ed (caller frees) and *out_size > 0. Fails
 * with TT_INVALID_ARGUMENT for counts below 1 or a device assignment with a
 * negative or repeated id, TT_RESOURCE_EXHAUSTED when out
 * of memory. */
tt_status_t tt_pjrt_compile_options_encode(const tt_pjrt_compile_config_t *config,
                                           uint8_t **out_bytes, size_t *out_size);

#endif /* TORCHTPU_BACKENDS_PJRT_PROTO_H_ */
