/* Unit tests for the PJRT backend's protobuf writer (src/backends/pjrt/
 * proto.c), byte for byte against the wire format, and for the loader's
 * error paths that need no plugin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/pjrt/proto.h"
#include "test_harness.h"
#include "torchtpu/pjrt.h"

static int bytes_equal(const tt_proto_writer_t *w, const uint8_t *expected, size_t n) {
  if (w->bytes.len != n) {
    fprintf(stderr, "size %zu, expected %zu\n", w->bytes.len, n);
    return 0;
  }
  return memcmp(w->bytes.data, expected, n) == 0;
}

static void test_varints(void) {
  struct {
    uint64_t value;
    uint8_t bytes[10];
    size_t n;
  } cases[] = {
      {0, {0x00}, 1},
      {1, {0x01}, 1},
      {127, {0x7f}, 1},
      {128, {0x80, 0x01}, 2},
      {300, {0xac, 0x02}, 2},
      {UINT64_MAX, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 10},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    tt_proto_writer_t w;
    tt_proto_writer_init(&w);
    tt_proto_write_varint(&w, cases[i].value);
    CHECK(bytes_equal(&w, cases[i].bytes, cases[i].n));
    tt_proto_writer_release(&w);
  }
}

static void test_fields(void) {
  tt_proto_writer_t w;
  tt_proto_writer_init(&w);
  tt_proto_write_int64_field(&w, 4, 1);    /* key 4<<3|0 = 0x20 */
  tt_proto_write_int64_field(&w, 1, -1);   /* two's complement: ten bytes */
  tt_proto_write_bool_field(&w, 2, 7);     /* any nonzero is written as 1 */
  tt_proto_write_bytes_field(&w, 3, "hi", 2); /* key 3<<3|2 = 0x1a */
  tt_proto_write_int64_field(&w, 20, 5);   /* key 160 needs two bytes */
  const uint8_t expected[] = {0x20, 0x01, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                              0xff, 0xff, 0x01, 0x10, 0x01, 0x1a, 0x02, 'h',  'i',  0xa0,
                              0x01, 0x05};
  CHECK(bytes_equal(&w, expected, sizeof(expected)));
  CHECK(tt_proto_writer_status(&w) == NULL);

  tt_proto_writer_t outer;
  tt_proto_writer_init(&outer);
  tt_proto_writer_t inner;
  tt_proto_writer_init(&inner);
  tt_proto_write_int64_field(&inner, 5, 2);
  tt_proto_write_message_field(&outer, 3, &inner);
  tt_proto_write_message_field(&outer, 6, &w); /* an empty-sized write is fine too */
  CHECK(outer.bytes.len == 4 + 2 + sizeof(expected));
  const uint8_t *od = (const uint8_t *)outer.bytes.data;
  CHECK(od[0] == 0x1a && od[1] == 0x02 && od[2] == 0x28 && od[3] == 0x02);
  CHECK(od[4] == 0x32 && od[5] == sizeof(expected));
  tt_proto_writer_release(&inner);
  tt_proto_writer_release(&outer);
  tt_proto_writer_release(&w);
}

static void test_compile_options(void) {
  tt_pjrt_compile_config_t config = tt_pjrt_compile_config_default();
  uint8_t *bytes = NULL;
  size_t size = 0;
  CHECK_OK(tt_pjrt_compile_options_encode(&config, &bytes, &size));
  /* executable_build_options (3) { device_ordinal (1) = -1,
   * num_replicas (4) = 1, num_partitions (5) = 1 } */
  const uint8_t expected[] = {0x1a, 0x0f, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                              0xff, 0xff, 0xff, 0x01, 0x20, 0x01, 0x28, 0x01};
  CHECK(size == sizeof(expected) && bytes && memcmp(bytes, expected, size) == 0);
  free(bytes);

  config.device_ordinal = 1;
  config.num_replicas = 2;
  config.portable = 1;
  CHECK_OK(tt_pjrt_compile_options_encode(&config, &bytes, &size));
  const uint8_t portable[] = {0x1a, 0x06, 0x08, 0x01, 0x20, 0x02, 0x28, 0x01, 0x20, 0x01};
  CHECK(size == sizeof(portable) && bytes && memcmp(bytes, portable, size) == 0);
  free(bytes);

  config = tt_pjrt_compile_config_default();
  config.num_partitions = 0;
  tt_status_t st = tt_pjrt_compile_options_encode(&config, &bytes, &size);
  CHECK(st && tt_status_code(st) == TT_INVALID_ARGUMENT);
  CHECK(st && strstr(tt_status_message(st), "num_partitions (0)"));
  CHECK(bytes == NULL && size == 0);
  tt_status_free(st);
  config = tt_pjrt_compile_config_default();
  config.device_ordinal = -2;
  st = tt_pjrt_compile_options_encode(&config, &bytes, &size);
  CHECK(st && strstr(tt_status_message(st), "device_ordinal must be -1"));
  tt_status_free(st);
}

/* SPMD and replicated programs: use_spmd_partitioning (6) and a
 * device_assignment (9) with one ComputationDevice per partition. */
static void test_compile_options_spmd(void) {
  tt_pjrt_compile_config_t config = tt_pjrt_compile_config_default();
  const int64_t two[2] = {0, 1};
  config.num_partitions = 2;
  config.use_spmd_partitioning = 1;
  config.device_assignment = two;
  uint8_t *bytes = NULL;
  size_t size = 0;
  CHECK_OK(tt_pjrt_compile_options_encode(&config, &bytes, &size));
  const uint8_t spmd[] = {0x1a, 0x1f, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                          0xff, 0x01, 0x20, 0x01, 0x28, 0x02, 0x30, 0x01,
                          0x4a, 0x0c, 0x08, 0x01, 0x10, 0x02,        /* 1 replica, 2 parts */
                          0x1a, 0x02, 0x08, 0x00, 0x1a, 0x02, 0x08, 0x01};
  CHECK(size == sizeof(spmd) && bytes && memcmp(bytes, spmd, size) == 0);
  free(bytes);

  /* Two replicas of one partition on devices 3 and 5: one ComputationDevice
   * listing both. */
  config = tt_pjrt_compile_config_default();
  const int64_t repl[2] = {3, 5};
  config.num_replicas = 2;
  config.device_assignment = repl;
  CHECK_OK(tt_pjrt_compile_options_encode(&config, &bytes, &size));
  const uint8_t replicated[] = {0x1a, 0x1b, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                0xff, 0xff, 0x01, 0x20, 0x02, 0x28, 0x01,
                                0x4a, 0x0a, 0x08, 0x02, 0x10, 0x01,
                                0x1a, 0x04, 0x08, 0x03, 0x08, 0x05};
  CHECK(size == sizeof(replicated) && bytes && memcmp(bytes, replicated, size) == 0);
  free(bytes);

  const int64_t dup[2] = {1, 1};
  config.device_assignment = dup;
  tt_status_t st = tt_pjrt_compile_options_encode(&config, &bytes, &size);
  CHECK(st && tt_status_code(st) == TT_INVALID_ARGUMENT);
  CHECK(st && strstr(tt_status_message(st), "entry 1 is device 1"));
  CHECK(bytes == NULL);
  tt_status_free(st);
}

static void test_loader_errors(void) {
  tt_pjrt_client_t *client = (tt_pjrt_client_t *)1;
  tt_status_t st = tt_pjrt_client_create("/nonexistent/libplugin.so", NULL, 0, &client);
  CHECK(client == NULL);
  CHECK(st && tt_status_code(st) == TT_IO_ERROR);
  CHECK(st && strstr(tt_status_message(st), "/nonexistent/libplugin.so: No such file"));
  tt_status_free(st);
  st = tt_pjrt_client_create("", NULL, 0, &client);
  CHECK(st && tt_status_code(st) == TT_INVALID_ARGUMENT);
  tt_status_free(st);
  /* A file that is not a shared object. */
  char path[] = "/tmp/tt_pjrt_not_a_plugin_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) {
    CHECK(write(fd, "not an ELF file\n", 16) == 16);
    close(fd);
    st = tt_pjrt_client_create(path, NULL, 0, &client);
    CHECK(st && tt_status_code(st) == TT_IO_ERROR);
    CHECK(st && strstr(tt_status_message(st), "could not be loaded"));
    tt_status_free(st);
    remove(path);
  }
}

int main(void) {
  test_varints();
  test_fields();
  test_compile_options();
  test_compile_options_spmd();
  test_loader_errors();
  return test_summary();
}
