/* The debug service (PT_XLA_DEBUG, XLA_IR_DEBUG, XLA_SAVE_TENSORS_FILE).
 * Engine calls that may cut a graph hand the engine the Python frames of
 * the caller (a thread-local context), and op recording hands it the frames
 * for XLA_IR_DEBUG. Both cost one flag test when debugging is off. Frames
 * are classified by path prefixes that torchtpu.debugging sets. */
#include "binding.h"
#include "torchtpu/debug.h"

typedef struct {
  char **items;
  Py_ssize_t n;
} prefix_list_t;

static prefix_list_t dbg_skip_analysis_; /* hidden in analysis frames */
static prefix_list_t dbg_skip_ir_;       /* hidden in IR node frames */
static prefix_list_t dbg_library_;       /* not the user's code */
static _Thread_local char *dbg_cause_;   /* explicit cause for this thread */

static int prefix_match(const prefix_list_t *l, const char *file) {
  for (Py_ssize_t i = 0; i < l->n; ++i)
    if (strncmp(file, l->items[i], strlen(l->items[i])) == 0) return 1;
  return 0;
}

#define DBG_MAX_FRAMES 64

typedef struct {
  tt_debug_frame_t f[DBG_MAX_FRAMES];
  PyObject *code[DBG_MAX_FRAMES]; /* keep the UTF-8 of names alive */
  int n;
} frames_t;

/* The calling Python thread's frames, innermost first, minus skipped ones. */
static void frames_capture(frames_t *out, const prefix_list_t *skip, int max) {
  out->n = 0;
  PyFrameObject *f = PyEval_GetFrame(); /* borrowed */
  Py_XINCREF(f);
  while (f && out->n < max) {
    PyCodeObject *code = PyFrame_GetCode(f);
    const char *file = PyUnicode_AsUTF8(code->co_filename);
    const char *fn = PyUnicode_AsUTF8(code->co_name);
    if (!file || !fn) PyErr_Clear();
    if (file && fn && !prefix_match(skip, file)) {
      tt_debug_frame_t *d = &out->f[out->n];
      d->function = fn;
      d->file = file;
      d->line = PyFrame_GetLineNumber(f);
      d->library = prefix_match(&dbg_library_, file);
      out->code[out->n++] = (PyObject *)code;
    } else {
      Py_DECREF(code);
    }
    PyFrameObject *back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  Py_XDECREF(f);
}

static void frames_release(frames_t *fr) {
  for (int i = 0; i < fr->n; ++i) Py_DECREF(fr->code[i]);
  fr->n = 0;
}

/* Around engine calls that may cut a graph (GIL held). */
int tt_py_debug_call_begin(void) {
  if (!tt_debug_wants_frames()) return 0;
  frames_t fr;
  frames_capture(&fr, &dbg_skip_analysis_, DBG_MAX_FRAMES);
  tt_debug_set_context(fr.f, fr.n, dbg_cause_);
  frames_release(&fr);
  return 1;
}

void tt_py_debug_call_end(int active) {
  if (active) tt_debug_clear_context();
}

/* Around op recording (XLA_IR_DEBUG). */
int tt_py_debug_node_begin(void) {
  if (!(tt_debug_flags() & TT_DEBUG_IR_FRAMES)) return 0;
  frames_t fr;
  frames_capture(&fr, &dbg_skip_ir_, 16);
  tt_debug_set_node_frames(fr.f, fr.n);
  frames_release(&fr);
  return 1;
}

void tt_py_debug_node_end(int active) {
  if (active) tt_debug_clear_node_frames();
}

static int prefix_list_set(prefix_list_t *l, PyObject *seq) {
  PyObject *fast = PySequence_Fast(seq, "expected a sequence of path prefixes");
  if (!fast) return 0;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  char **items = calloc((size_t)n + 1, sizeof(*items));
  int ok = items != NULL;
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    const char *s = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(fast, i));
    ok = s && (items[i] = strdup(s)) != NULL;
  }
  Py_DECREF(fast);
  if (!ok) {
    for (Py_ssize_t i = 0; items && i < n; ++i) free(items[i]);
    free(items);
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return 0;
  }
  for (Py_ssize_t i = 0; i < l->n; ++i) free(l->items[i]);
  free(l->items);
  l->items = items;
  l->n = n;
  return 1;
}

/* debug_set_frame_filters(skip_analysis, skip_ir, library) */
static PyObject *py_debug_set_frame_filters(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *a, *b, *c;
  if (!PyArg_ParseTuple(args, "OOO", &a, &b, &c)) return NULL;
  if (!prefix_list_set(&dbg_skip_analysis_, a) || !prefix_list_set(&dbg_skip_ir_, b) ||
      !prefix_list_set(&dbg_library_, c))
    return NULL;
  Py_RETURN_NONE;
}

static PyObject *py_debug_config(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_debug_config_t c;
  tt_debug_get_config(&c);
  return Py_BuildValue("{s:i,s:i,s:i,s:O,s:s,s:z,s:z,s:z}", "level", c.level, "max_frames",
                       c.max_frames, "local_rank", c.local_rank, "ir_debug",
                       c.ir_debug ? Py_True : Py_False, "save_tensors_fmt",
                       c.save_tensors_fmt ? "dot" : "text", "debug_file", c.debug_file,
                       "save_tensors_file", c.save_tensors_file, "dump_dir", c.dump_dir);
}

/* debug_configure(level, max_frames, local_rank, ir_debug, fmt, debug_file,
 * save_tensors_file, dump_dir); fmt is 0 (text) or 1 (dot). */
static PyObject *py_debug_configure(PyObject *m, PyObject *args) {
  (void)m;
  tt_debug_config_t c;
  memset(&c, 0, sizeof(c));
  int ir = 0;
  if (!PyArg_ParseTuple(args, "iiipizzz", &c.level, &c.max_frames, &c.local_rank, &ir,
                        &c.save_tensors_fmt, &c.debug_file, &c.save_tensors_file, &c.dump_dir))
    return NULL;
  c.ir_debug = ir;
  tt_status_t st = tt_debug_configure(&c);
  if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_debug_configure_from_env(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_debug_config_t c;
  tt_debug_config_from_env(&c);
  tt_status_t st = tt_debug_configure(&c);
  if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_set_graph_name(PyObject *m, PyObject *args) {
  (void)m;
  const char *name = NULL;
  if (!PyArg_ParseTuple(args, "z", &name)) return NULL;
  tt_debug_set_graph_name(name);
  Py_RETURN_NONE;
}

static PyObject *py_graph_name(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  const char *name = tt_debug_graph_name();
  if (!name) Py_RETURN_NONE;
  return PyUnicode_FromString(name);
}

static PyObject *py_debug_set_cause(PyObject *m, PyObject *args) {
  (void)m;
  const char *cause = NULL;
  if (!PyArg_ParseTuple(args, "z", &cause)) return NULL;
  char *copy = cause && *cause ? strdup(cause) : NULL;
  if (cause && *cause && !copy) return PyErr_NoMemory();
  free(dbg_cause_);
  dbg_cause_ = copy;
  Py_RETURN_NONE;
}

static PyObject *py_debug_set_eager(PyObject *m, PyObject *args) {
  (void)m;
  int eager = 0;
  if (!PyArg_ParseTuple(args, "p", &eager)) return NULL;
  tt_debug_set_eager(eager);
  Py_RETURN_NONE;
}

static PyObject *py_debug_last_recompile(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  char *text = tt_debug_last_recompile();
  if (!text) Py_RETURN_NONE;
  PyObject *r = PyUnicode_FromString(text);
  free(text);
  return r;
}

/* debug_dump(graph_hash, stage, ext, text) */
static PyObject *py_debug_dump(PyObject *m, PyObject *args) {
  (void)m;
  unsigned long long hash;
  const char *stage, *ext, *text;
  if (!PyArg_ParseTuple(args, "Ksss", &hash, &stage, &ext, &text)) return NULL;
  tt_status_t st = tt_debug_dump((uint64_t)hash, stage, ext, text);
  if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

PyMethodDef tt_py_methods_debug[] = {
    {"debug_set_frame_filters", py_debug_set_frame_filters, METH_VARARGS,
     "debug_set_frame_filters(skip_analysis, skip_ir, library): path prefixes"},
    {"debug_config", py_debug_config, METH_NOARGS, "the debug configuration (dict)"},
    {"debug_configure", py_debug_configure, METH_VARARGS,
     "debug_configure(level, max_frames, local_rank, ir_debug, fmt, debug_file, save_file, dump_dir)"},
    {"debug_configure_from_env", py_debug_configure_from_env, METH_NOARGS, "re-read the environment"},
    {"set_graph_name", py_set_graph_name, METH_VARARGS, "set_graph_name(name or None), this thread"},
    {"graph_name", py_graph_name, METH_NOARGS, "this thread's graph name or None"},
    {"debug_set_cause", py_debug_set_cause, METH_VARARGS, "debug_set_cause(text or None), this thread"},
    {"debug_set_eager", py_debug_set_eager, METH_VARARGS,
     "debug_set_eager(bool): eager mode in effect (analysis blocks off)"},
    {"debug_last_recompile", py_debug_last_recompile, METH_NOARGS, "last recompilation diff or None"},
    {"debug_dump", py_debug_dump, METH_VARARGS, "debug_dump(graph_hash, stage, ext, text)"},
    {NULL, NULL, 0, NULL},
};
