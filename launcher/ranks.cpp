#include "launcher/ranks.h"

#include <spdlog/spdlog.h>

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <thread>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "core/cpu/blas_kernels.h"
#include "parallel/comm_choice.h"
#include "launcher/world.h"
#ifdef LINNET_HAVE_MPI
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/nccl_communicator.h"
#endif

namespace linnet::cli {

struct Ranks::Mpi {
#ifdef LINNET_HAVE_MPI
  Groups groups;
#endif
};

#ifdef LINNET_HAVE_MPI
// NCCL between distinct GPUs; MPI otherwise: host tensors, or device tensors staged through
// the host when ranks share a GPU (NCCL refuses that). Every shard's device is gathered and
// the choice made once for the group (parallel/comm_choice.h). LINNET_COMM=mpi|nccl forces.
std::unique_ptr<Communicator> Ranks::make_shard_communicator(const MpiRuntime&) {
  const char* forced = std::getenv("LINNET_COMM");
  std::string mine = backend_->device() == Device::cuda ? "cuda:" + backend_->device_id() : "cpu";
  mine.resize(96, '\0');
  int size = 0;
  MPI_Comm_size(mpi_->groups.shard_comm, &size);
  std::vector<char> all(static_cast<size_t>(size) * 96);
  if (MPI_Allgather(mine.data(), 96, MPI_CHAR, all.data(), 96, MPI_CHAR, mpi_->groups.shard_comm) != MPI_SUCCESS)
    throw Error("MPI_Allgather of the shards' devices failed");
  std::vector<std::string> devices;
  for (int r = 0; r < size; ++r) devices.emplace_back(all.data() + r * 96);
  if (choose_shard_comm(devices, forced ? forced : "") == ShardComm::nccl)
    return make_nccl_communicator(mpi_->groups.shard_comm, backend_->device_index(), backend_->stream_handle(),
                                  backend_.get());
  return std::make_unique<MpiCommunicator>(mpi_->groups.shard_comm, backend_.get());
}
#endif

Ranks::Ranks(int tp, const std::string& backend_kind, int threads) {
#ifdef LINNET_HAVE_MPI
  if (const MpiRuntime* rt = mpi_runtime()) {
    world_rank_ = rt->world_rank();
    world_size_ = rt->world_size();
    mpi_ = std::make_unique<Mpi>();
    mpi_->groups = rt->make_groups(tp);  // --tp K not dividing the world: an error on every rank
    replica_ = mpi_->groups.replica;
    replicas_ = mpi_->groups.replicas;
    backend_ = make_backend(backend_kind, rt->local_rank());  // GPU local_rank on CUDA
    local_size_ = rt->local_size();
    if (threads > 0) omp_set_num_threads(threads);
    else share_cores(rt->local_size());
    shards_ = make_shard_communicator(*rt);
    log_blas_choice();
    spdlog::info("backend {} ({} threads), replica {} of {}, shard {} of {} ({} communicator)", backend_->name(),
                 omp_get_max_threads(), replica_,
                 replicas_, shards_->rank(), shards_->size(), shards_->name());
    return;
  }
#endif
  if (tp > 1) throw Error(str("--tp ", tp, " needs ", tp, " ranks, but this run has 1 (start it with mpirun)"));
  backend_ = make_backend(backend_kind, 0);
  if (threads > 0) omp_set_num_threads(threads);
  shards_ = std::make_unique<SingleCommunicator>();
  spdlog::info("backend {} ({} threads), 1 rank", backend_->name(), omp_get_max_threads());
  log_blas_choice();
}

Ranks::~Ranks() {
#ifdef LINNET_HAVE_MPI
  if (control_comm_) {
    MPI_Comm_free(static_cast<MPI_Comm*>(control_comm_));
    delete static_cast<MPI_Comm*>(control_comm_);
  }
#endif
}

void Ranks::log_blas_choice() const {
  if (backend_->device() != Device::cpu) return;
  if (const char* was = std::getenv("LINNET_BLAS_CHOSEN"))
    spdlog::info("OpenBLAS kernels: {} (it had chosen {} for this CPU; OPENBLAS_CORETYPE overrides)", blas_coretype(), was);
  else
    spdlog::debug("OpenBLAS kernels: {}", blas_coretype());
}

// Ranks on one node share its cores: unless OMP_NUM_THREADS says otherwise, each takes its
// share (OpenMP threads that outnumber cores spin against each other). A rank bound to
// fewer cores (mpirun's default --bind-to core) keeps what it was given.
void Ranks::share_cores(int local_ranks) {
  if (std::getenv("OMP_NUM_THREADS") || local_ranks <= 1) return;
  cpu_set_t set;
  const int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  omp_set_num_threads(std::max(1, std::min(allowed, all / local_ranks)));
}

std::string Ranks::replica_path(std::string pattern) const {
  for (size_t at; (at = pattern.find("{replica}")) != std::string::npos;)
    pattern.replace(at, 9, std::to_string(replica_));
  return pattern;
}

void Ranks::world_barrier() {
#ifdef LINNET_HAVE_MPI
  if (mpi_) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

#ifdef LINNET_HAVE_MPI
namespace {
// MPI's wait, but with a short sleep between tests: an idle server rank then costs no core.
void wait_sleeping(MPI_Request& r, const char* what) {
  for (int done = 0;;) {
    if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) throw Error(str("serve: ", what, " failed (a rank is gone?)"));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}
MPI_Comm control(void*& slot) {
  if (!slot) {
    auto* c = new MPI_Comm;
    if (MPI_Comm_dup(MPI_COMM_WORLD, c) != MPI_SUCCESS) throw Error("MPI_Comm_dup of the world failed");
    MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
    slot = c;
  }
  return *static_cast<MPI_Comm*>(slot);
}
}  // namespace
#endif

void Ranks::world_broadcast(std::string& text) {
#ifdef LINNET_HAVE_MPI
  if (!mpi_ || world_size_ == 1) return;
  MPI_Comm comm = control(control_comm_);
  uint64_t n = text.size();
  MPI_Request r;
  MPI_Ibcast(&n, 1, MPI_UINT64_T, 0, comm, &r);
  wait_sleeping(r, "the broadcast of a step's plan");
  text.resize(n);
  MPI_Ibcast(text.data(), static_cast<int>(n), MPI_CHAR, 0, comm, &r);
  wait_sleeping(r, "the broadcast of a step's plan");
#else
  (void)text;
#endif
}

std::vector<std::string> Ranks::world_gather(const std::string& text) {
#ifdef LINNET_HAVE_MPI
  if (mpi_ && world_size_ > 1) {
    MPI_Comm comm = control(control_comm_);
    int n = static_cast<int>(text.size());
    std::vector<int> sizes(static_cast<size_t>(world_size_)), offsets(static_cast<size_t>(world_size_));
    MPI_Request r;
    MPI_Igather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm, &r);
    wait_sleeping(r, "the gathering of the replicas' reports");
    std::string all;
    if (world_rank_ == 0) {
      for (int i = 1; i < world_size_; ++i) offsets[i] = offsets[i - 1] + sizes[i - 1];
      all.resize(static_cast<size_t>(offsets.back() + sizes.back()));
    }
    MPI_Igatherv(text.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0, comm, &r);
    wait_sleeping(r, "the gathering of the replicas' reports");
    std::vector<std::string> out;
    if (world_rank_ == 0)
      for (int i = 0; i < world_size_; ++i) out.push_back(all.substr(static_cast<size_t>(offsets[i]), static_cast<size_t>(sizes[i])));
    return out;
  }
#endif
  return {text};
}

int Ranks::sharing_memory() const {
  if (backend_->device() == Device::cpu) return local_size_;
  const int gpus = std::max(1, cuda_device_count());
  return (local_size_ + gpus - 1) / gpus;
}

// Shard 0 of the replica reads the file; the others get its tensors by broadcast: first a
// JSON list of (name, dtype, shape), then each tensor's bytes. A file shard 0 cannot read is
// an error on every shard (all_ok), not a hang in the broadcast.
std::map<std::string, Tensor> Ranks::read_inputs(const std::string& path) {
  Communicator& comm = *shards_;
  std::map<std::string, Tensor> out;
  std::string header, problem;
  if (comm.rank() == 0) {
    try {
      SafetensorsFile file(path);
      nlohmann::json list = nlohmann::json::array();
      for (const auto& name : file.names()) {
        out[name] = file.read(name);
        list.push_back({name, dtype_name(out[name].dtype()), out[name].shape().dims()});
      }
      header = list.dump();
    } catch (const Error& e) {
      problem = str("--inputs: ", e.what());
    }
  }
  if (!comm.all_ok(problem.empty()))
    throw Error(problem.empty() ? str("--inputs: shard 0 of replica ", replica_, " cannot read ", path, " (its error says why)")
                                : problem);
  if (comm.size() == 1) return out;
  Tensor len = Tensor::from_ints({1}, {static_cast<int64_t>(header.size())}, DType::i64);
  comm.broadcast(len, 0);
  const int64_t n = len.to_ints()[0];
  Tensor bytes = Tensor::zeros({(n + 3) / 4}, DType::i32);
  std::memcpy(bytes.data(), header.data(), header.size());
  comm.broadcast(bytes, 0);
  const auto list = nlohmann::json::parse(std::string(static_cast<const char*>(bytes.data()), static_cast<size_t>(n)));
  for (const auto& e : list) {
    const std::string name = e[0].get<std::string>();
    if (comm.rank() != 0) out[name] = Tensor::empty(Shape(e[2].get<std::vector<int64_t>>()), parse_dtype(e[1].get<std::string>()));
    comm.broadcast(out[name], 0);
  }
  return out;
}

// Each replica's shard 0 writes its own file when the path names {replica}; otherwise only
// world rank 0 writes (every rank of a replica holds the same full outputs).
bool Ranks::writes_outputs(const std::string& path) const {
  const bool per_replica = path != replica_path_template_;
  return shards_->rank() == 0 && (per_replica || world_rank_ == 0);
}

void Ranks::check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  std::string problem;
  if (writes_outputs(path)) {
    std::error_code ec;
    const fs::path p(path);
    const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
    if (fs::exists(p, ec) && !fs::is_regular_file(p, ec))
      problem = str(path, ": --outputs names something that is not a regular file");
    else if (!fs::is_directory(parent, ec))
      problem = str(path, ": cannot write --outputs: directory ", parent.string(), " does not exist");
    else if (::access(parent.c_str(), W_OK | X_OK) != 0 || (fs::exists(p, ec) && ::access(path.c_str(), W_OK) != 0))
      problem = str(path, ": cannot write --outputs: ", std::strerror(errno));
  }
  if (!shards_->all_ok(problem.empty()))
    throw Error(problem.empty() ? str("--outputs: shard 0 of replica ", replica_, " cannot write ", path,
                                      " (its error says why)")
                                : problem);
}

void Ranks::write_outputs(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& outputs) {
  if (!writes_outputs(path)) return;
  save_safetensors(path, outputs);
  spdlog::info("wrote {} outputs to {}", outputs.size(), path);
}

}  // namespace linnet::cli
