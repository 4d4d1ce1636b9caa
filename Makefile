# C build for unit tests (the Python extension is built by setup.py from the
# same sources). `make test-c` builds every tests/c/test_*.c against the
# engine (compiled once) with AddressSanitizer + UBSan and runs it.
# (alloc_dealloc_mismatch is off for XLA's CPU plugin, C++ built without
# the sanitizer, which test_pjrt_multi loads when TORCHTPU_PJRT_CPU_PLUGIN
# names it.)
CC ?= cc
CFLAGS_COMMON = -std=c11 -D_GNU_SOURCE -fno-trapping-math -Wall -Wextra -Werror -Iinclude -Isrc -pthread
SAN = -fsanitize=address,undefined -fno-omit-frame-pointer
SRCS = $(shell find src -name '*.c' | sort)
HDRS = $(shell find include src -name '*.h' -o -name '*.def')
# The engine is compiled once (sanitized objects) and linked into every test;
# compiling all of it again per test made most of the suite's time.
OBJS = $(patsubst src/%.c,build/ctest/obj/%.o,$(SRCS))
TESTS = $(patsubst tests/c/%.c,build/ctest/%,$(wildcard tests/c/test_*.c))
# Keep the objects: as a pattern rule's prerequisites they are otherwise
# intermediates, deleted after each build (a full rebuild every time).
.SECONDARY: $(OBJS)

build/ctest/obj/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -O1 -g $(SAN) -c -o $@ $<

build/ctest/%: tests/c/%.c $(OBJS) $(HDRS)
	@mkdir -p build/ctest
	$(CC) $(CFLAGS_COMMON) -O1 -g $(SAN) -o $@ $< $(OBJS) -lm -ldl

test-c: $(TESTS)
	@set -e; for t in $(TESTS); do echo "== $$t"; ASAN_OPTIONS=detect_leaks=1:alloc_dealloc_mismatch=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 $$t; done

.PHONY: test-c
