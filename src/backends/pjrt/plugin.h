/* Loading PJRT plugins: one dlopen, GetPjrtApi and PJRT_Plugin_Initialize
 * per library for the life of the process, and the conversion of plugin
 * errors into statuses. Internal to src/backends/pjrt/. */
#ifndef TORCHTPU_BACKENDS_PJRT_PLUGIN_H_
#define TORCHTPU_BACKENDS_PJRT_PLUGIN_H_

#include "backends/pjrt/pjrt_abi.h"
#include "torchtpu/base.h"

/* Loads (or finds already loaded) the plugin at `path` and returns its
 * function table, which lives for the rest of the process. Fails with
 * TT_IO_ERROR (missing or unloadable file; dlerror's text), TT_INVALID_
 * ARGUMENT (no GetPjrtApi, a NULL table, another major version, a minor
 * version below TT_PJRT_ABI_MIN_MINOR, a table shorter than the slots this
 * backend calls) or the plugin's PJRT_Plugin_Initialize error. A failed
 * load is retried on the next call. */
tt_status_t tt_pjrt_plugin_load(const char *path, const tt_pjrt_abi_api_t **out_api);

/* NULL when `error` is NULL; otherwise a status "<what>: <plugin message>"
 * with a code mapped from the plugin's error code, and `error` destroyed. */
tt_status_t tt_pjrt_plugin_status(const tt_pjrt_abi_api_t *api, tt_pjrt_abi_error_t *error,
                                  const char *what);

/* Waits for `event` (may be NULL) and destroys it; the event's error, if
 * any, becomes the status. */
tt_status_t tt_pjrt_plugin_await(const tt_pjrt_abi_api_t *api, tt_pjrt_abi_event_t *event,
                                 const char *what);

/* Options as the plugin's named values (`what` names the caller in
 * errors: "client", "topology"); *out_values is NULL when there are none,
 * else the caller frees it. The strings stay the caller's. */
struct tt_pjrt_option_s;
tt_status_t tt_pjrt_named_values(const char *what, const struct tt_pjrt_option_s *options,
                                 size_t num_options, tt_pjrt_abi_named_value_t **out_values);

#endif /* TORCHTPU_BACKENDS_PJRT_PLUGIN_H_ */
