// The cross-process transport driven from C++ (docs/collectives.md,
// "Several processes"): the optional extension torchtpu._c10d_transport.
//
// Contract: install(make_group, failure, mismatch, timeout_s) returns the
// address of serve(), a tt_collective_transport_serve_fn
// (include/torchtpu/collective.h) that process_transport.py attaches to the
// engine. The leader of a cross-process collective then calls serve() on
// its own thread: no queue, no Python, no thread hand-off. serve() does
// what process_transport.py's channels do, over c10d's generic Backend
// interface (torch's wheel ships no Gloo headers):
//
// 1. the header: one allgather of every leader's call (sig, sequence
//    number, device, process, description); a difference fails the
//    request with mismatch()'s message, which names both sides.
// 2. the data, on at::from_blob views of the leader's buffers: allreduce,
//    allgather, broadcast, alltoall_base (reduce_scatter, all_to_all: one
//    chunk per process; reduce_scatter reduces the received chunks in
//    process order), send/recv pairs (collective_permute).
//
// Python is entered only off the hot path, under the GIL: make_group(ids)
// the first time a group is used (it returns (ProcessGroupGloo, rank,
// processes) or an error text; Python keeps the groups, made over the
// job's store with TORCHTPU_COLLECTIVE_TIMEOUT_S as Gloo's timeout, so
// every Gloo call is bounded by it), and failure(ids, desc, seq, text),
// which turns an exception's text into the message the Python transport
// gives (it reads the store for a peer's published exception).
// counters() returns ({op: requests}, {op: payload bytes sent to other
// processes}) as process_transport.requests()/bytes_sent() count them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "torchtpu/collective.h"

namespace py = pybind11;

namespace {

constexpr int kSigLen = TT_XP_SIG_LEN;
constexpr int kDescBytes = 160;
constexpr int kHeaderLen = kSigLen + 3 + kDescBytes / 8;

const char *const kOpNames[] = {"all_reduce",     "all_gather", "broadcast",         "barrier",
                                "reduce_scatter", "all_to_all", "collective_permute"};

struct Group {
  c10::intrusive_ptr<c10d::Backend> pg;
  int rank = 0;
  std::vector<int64_t> processes;
  int64_t seq = 0;  // used by this group's one leader thread only
};

struct Shim {
  py::object make_group, failure, mismatch;
  std::chrono::milliseconds timeout{300000};
  std::mutex lock;  // groups and counters
  std::map<std::vector<int64_t>, Group *> groups;
  std::map<std::string, int64_t> requests, sent;
};

Shim *shim = nullptr;  // made once, never destroyed (leaders may run at exit)

void count(std::map<std::string, int64_t> &m, const char *op, int64_t n) {
  std::lock_guard<std::mutex> g(shim->lock);
  m[op] += n;
}

at::ScalarType scalar_type(int code) {
  switch (code) {
    case 0: return at::kFloat;
    case 1: return at::kDouble;
    case 2: return at::kHalf;
    case 3: return at::kBFloat16;
    case 4: return at::kChar;
    case 5: return at::kByte;
    case 6: return at::kShort;
    case 7: return at::kInt;
    case 8: return at::kLong;
    case 9: return at::kBool;
    case 10: return at::kComplexFloat;
  }
  throw std::runtime_error("dtype " + std::to_string(code) + " has no cross-process form");
}

// nbytes at p (the leader's memory, kept until serve() returns).
at::Tensor view(const void *p, int64_t nbytes) {
  if (nbytes == 0) return at::empty({0}, at::kByte);
  return at::from_blob(const_cast<void *>(p), {nbytes}, at::kByte);
}

// Thrown for a failure whose message is final (not a Gloo error).
struct Final {
  std::string text;
};

std::string text_of(const std::exception &e) {
  if (auto *c = dynamic_cast<const c10::Error *>(&e)) return c->what_without_backtrace();
  return e.what();
}

Group *group_for(const tt_collective_transport_request_t *rq) {
  std::vector<int64_t> ids(rq->ids, rq->ids + rq->n);
  {
    std::lock_guard<std::mutex> g(shim->lock);
    auto it = shim->groups.find(ids);
    if (it != shim->groups.end()) return it->second;
  }
  py::gil_scoped_acquire gil;
  py::object r = shim->make_group(py::tuple(py::cast(ids)));
  if (py::isinstance<py::str>(r)) throw std::runtime_error(r.cast<std::string>());
  auto t = r.cast<py::tuple>();
  auto *group = new Group;
  group->pg = c10::intrusive_ptr<c10d::Backend>::unsafe_reclaim_from_nonowning(
      t[0].cast<c10d::Backend *>());
  group->rank = t[1].cast<int>();
  group->processes = t[2].cast<std::vector<int64_t>>();
  std::lock_guard<std::mutex> g(shim->lock);
  auto it = shim->groups.find(ids);
  if (it != shim->groups.end()) {
    delete group;  // unreachable: one leader per group
    return it->second;
  }
  shim->groups[ids] = group;
  return group;
}

void wait(const c10::intrusive_ptr<c10d::Work> &w) { w->wait(); }

std::vector<int64_t> header_of(const tt_collective_transport_request_t *rq, int64_t seq,
                               int64_t process) {
  std::vector<int64_t> h(kHeaderLen, 0);
  for (int i = 0; i < kSigLen; ++i) h[i] = rq->sig[i];
  h[kSigLen] = seq;
  h[kSigLen + 1] = rq->device;
  h[kSigLen + 2] = process;
  std::memcpy(h.data() + kSigLen + 3, rq->desc, strnlen(rq->desc, kDescBytes));
  return h;
}

// 1. The header exchange (see the contract).
void check_headers(Group *g, const tt_collective_transport_request_t *rq, int64_t seq) {
  auto P = (int64_t)g->processes.size();
  at::Tensor mine = at::tensor(header_of(rq, seq, g->processes[g->rank]), at::kLong);
  at::Tensor all = at::empty({P, kHeaderLen}, at::kLong);
  std::vector<at::Tensor> in{mine};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int64_t p = 0; p < P; ++p) out[0].push_back(all[p]);
  wait(g->pg->allgather(out, in));
  const int64_t *h = all.data_ptr<int64_t>();
  for (int64_t p = 1; p < P; ++p) {
    if (std::memcmp(h + p * kHeaderLen, h, sizeof(int64_t) * (kSigLen + 1)) == 0) continue;
    py::gil_scoped_acquire gil;
    std::vector<int64_t> other(h + p * kHeaderLen, h + (p + 1) * kHeaderLen),
        first(h, h + kHeaderLen), ids(rq->ids, rq->ids + rq->n);
    throw Final{shim->mismatch(py::tuple(py::cast(ids)), other, first).cast<std::string>()};
  }
}

// (c10d reduction, dtype Gloo reduces in) for the engine's reduction of
// dtype, as process_transport._reduce_plan picks them.
std::pair<c10d::ReduceOp::RedOpType, at::ScalarType> reduce_plan(int reduce, at::ScalarType dt) {
  using R = c10d::ReduceOp;
  if (dt == at::kBool)
    return {(reduce == TT_RED_SUM || reduce == TT_RED_ANY || reduce == TT_RED_MAX) ? R::MAX : R::MIN,
            at::kByte};
  R::RedOpType op;
  switch (reduce) {
    case TT_RED_SUM: op = R::SUM; break;
    case TT_RED_PROD: op = R::PRODUCT; break;
    case TT_RED_MAX: op = R::MAX; break;
    case TT_RED_MIN: op = R::MIN; break;
    case TT_RED_ALL: op = R::BAND; break;
    case TT_RED_ANY: op = R::BOR; break;
    default:
      throw std::runtime_error("reduction " + std::to_string(reduce) +
                               " has no cross-process form");
  }
  if (dt == at::kHalf || dt == at::kBFloat16) return {op, at::kFloat};
  if (dt == at::kShort) return {op, at::kInt};
  if (dt == at::kComplexFloat) return {op, at::kFloat};
  return {op, dt};
}

void all_reduce(Group *g, const tt_collective_transport_request_t *rq, at::ScalarType dt,
                int64_t nbytes) {
  if (nbytes == 0) return;
  at::Tensor out = view(rq->recv, nbytes);
  if (rq->send != rq->recv) out.copy_(view(rq->send, nbytes));
  at::Tensor typed = out.view(dt);
  auto plan = reduce_plan(rq->reduce, dt);
  bool widened = false;
  at::Tensor work;
  if (dt == at::kComplexFloat) work = typed.view(at::kFloat);
  else if (dt == at::kBool) work = typed.view(at::kByte);
  else if (plan.second != dt) work = typed.to(plan.second), widened = true;
  else work = typed;
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp(plan.first);
  std::vector<at::Tensor> ts{work};
  wait(g->pg->allreduce(ts, opts));
  if (widened) typed.copy_(work.to(dt));
}

// out = the reduction of parts' rows (one per process, in process order),
// 16-bit floats in float32, rounded once.
void reduce_chunks(int reduce, at::ScalarType dt, const at::Tensor &parts, at::Tensor out) {
  if (dt == at::kBool) {
    bool all = reduce == TT_RED_PROD || reduce == TT_RED_MIN || reduce == TT_RED_ALL;
    out.copy_(all ? parts.all(0) : parts.any(0));
    return;
  }
  at::ScalarType wide = (dt == at::kHalf || dt == at::kBFloat16) ? at::kFloat : dt;
  at::Tensor acc = parts[0].to(wide).clone();
  for (int64_t p = 1; p < parts.size(0); ++p) {
    at::Tensor row = parts[p].to(wide);
    switch (reduce) {
      case TT_RED_SUM: acc.add_(row); break;
      case TT_RED_PROD: acc.mul_(row); break;
      case TT_RED_MAX: acc = at::maximum(acc, row); break;
      case TT_RED_MIN: acc = at::minimum(acc, row); break;
      case TT_RED_ALL: acc.bitwise_and_(row); break;
      case TT_RED_ANY: acc.bitwise_or_(row); break;
      default:
        throw std::runtime_error("reduction " + std::to_string(reduce) +
                                 " has no cross-process form");
    }
  }
  out.copy_(acc.to(dt));
}

void exchange(Group *g, const tt_collective_transport_request_t *rq, at::ScalarType dt,
              int64_t nbytes) {
  auto P = (int64_t)g->processes.size();
  if (nbytes == 0) return;
  at::Tensor src = view(rq->send, P * nbytes);
  std::vector<int64_t> none;
  if (rq->op == TT_XP_ALL_TO_ALL) {
    at::Tensor dst = view(rq->recv, P * nbytes);
    wait(g->pg->alltoall_base(dst, src, none, none));
    count(shim->sent, "all_to_all", (P - 1) * nbytes);
    return;
  }
  at::Tensor parts = at::empty({P * nbytes}, at::kByte);
  wait(g->pg->alltoall_base(parts, src, none, none));
  count(shim->sent, "reduce_scatter", (P - 1) * nbytes);
  reduce_chunks(rq->reduce, dt, parts.view(dt).view({P, rq->count}), view(rq->recv, nbytes).view(dt));
}

void permute(Group *g, const tt_collective_transport_request_t *rq) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (int32_t i = 0; i < rq->num_xfers; ++i) {
    const int64_t *x = rq->xfers + (size_t)i * TT_XP_XFER_LEN;
    int64_t nbytes = x[TT_XP_XFER_BYTES];
    if (nbytes == 0) continue;
    int peer = (int)x[TT_XP_XFER_PEER], tag = (int)x[TT_XP_XFER_TAG];
    if (x[TT_XP_XFER_DIR] == 0) {
      std::vector<at::Tensor> ts{view((const char *)rq->send + x[TT_XP_XFER_OFFSET], nbytes)};
      works.push_back(g->pg->send(ts, peer, tag));
      count(shim->sent, "collective_permute", nbytes);
    } else {
      std::vector<at::Tensor> ts{view((char *)rq->recv + x[TT_XP_XFER_OFFSET], nbytes)};
      works.push_back(g->pg->recv(ts, peer, tag));
    }
  }
  for (auto &w : works) w->wait(shim->timeout);
}

// 2. The data.
void move(Group *g, const tt_collective_transport_request_t *rq) {
  if (rq->op == TT_XP_BARRIER) return;
  at::ScalarType dt = scalar_type(rq->dtype);
  int64_t nbytes = rq->count * (int64_t)c10::elementSize(dt);
  auto P = (int64_t)g->processes.size();
  switch (rq->op) {
    case TT_XP_ALL_REDUCE: all_reduce(g, rq, dt, nbytes); return;
    case TT_XP_ALL_GATHER: {
      if (nbytes == 0) return;
      at::Tensor out = view(rq->recv, P * nbytes);
      std::vector<std::vector<at::Tensor>> outs(1);
      for (int64_t p = 0; p < P; ++p) outs[0].push_back(out.narrow(0, p * nbytes, nbytes));
      std::vector<at::Tensor> in{view(rq->send, nbytes)};
      wait(g->pg->allgather(outs, in));
      count(shim->sent, "all_gather", (P - 1) * nbytes);
      return;
    }
    case TT_XP_REDUCE_SCATTER:
    case TT_XP_ALL_TO_ALL: exchange(g, rq, dt, nbytes); return;
    case TT_XP_PERMUTE: permute(g, rq); return;
    case TT_XP_BROADCAST: {
      if (nbytes == 0) return;
      at::Tensor t = view(rq->recv, nbytes);
      if (rq->send != rq->recv) t.copy_(view(rq->send, nbytes));
      c10d::BroadcastOptions opts;
      int64_t root = 0;
      while (root < P && g->processes[root] != rq->root_process) ++root;
      opts.rootRank = root;
      opts.rootTensor = 0;
      std::vector<at::Tensor> ts{t};
      wait(g->pg->broadcast(ts, opts));
      return;
    }
    default: throw std::runtime_error("unknown cross-process op " + std::to_string(rq->op));
  }
}

char *dup(const std::string &s) { return strdup(s.c_str()); }

// The message of a failed call, from Python's failure() (see the contract).
char *failed(const tt_collective_transport_request_t *rq, int64_t seq, const std::string &text) {
  try {
    py::gil_scoped_acquire gil;
    std::vector<int64_t> ids(rq->ids, rq->ids + rq->n);
    return dup(shim->failure(py::tuple(py::cast(ids)), std::string(rq->desc), seq, text)
                   .cast<std::string>());
  } catch (const std::exception &e) {
    return dup(std::string(rq->desc) + " across processes failed: " + text);
  }
}

extern "C" char *serve(tt_collective_transport_request_t *rq) {
  Group *g = nullptr;
  int64_t seq = 0;
  try {
    g = group_for(rq);
    seq = g->seq++;
  } catch (const Final &f) {
    return dup(f.text);
  } catch (const std::exception &e) {
    return failed(rq, -1, text_of(e));
  }
  try {
    check_headers(g, rq, seq);
    count(shim->requests, kOpNames[rq->op], 1);
    move(g, rq);
  } catch (const Final &f) {
    return dup(f.text);
  } catch (const std::exception &e) {
    return failed(rq, seq, text_of(e));
  }
  return nullptr;
}

}  // namespace

PYBIND11_MODULE(_c10d_transport, m) {
  m.doc() = "torchtpu's cross-process transport over c10d, called by the engine's leaders";
  m.def("install",
        [](py::object make_group, py::object failure, py::object mismatch, double timeout_s) {
          if (!shim) shim = new Shim;
          shim->make_group = make_group;
          shim->failure = failure;
          shim->mismatch = mismatch;
          shim->timeout = std::chrono::milliseconds((int64_t)(timeout_s * 1000));
          return (uint64_t)(uintptr_t)&serve;
        });
  m.def("counters", []() -> py::tuple {
    if (!shim) return py::make_tuple(py::dict(), py::dict());
    std::lock_guard<std::mutex> g(shim->lock);
    return py::make_tuple(py::cast(shim->requests), py::cast(shim->sent));
  });
}
