#include "parallel/control_channel.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/backend.h"
#include "core/error.h"
#include "parallel/communicator.h"
#ifdef LINNET_HAVE_MPI
#include "parallel/comm_choice.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/nccl_communicator.h"
#endif

namespace linnet {

#ifdef LINNET_HAVE_MPI

struct ControlChannel::Impl {
  bool mpi = false;
  int rank = 0, size = 1;
  MPI_Comm comm = MPI_COMM_NULL;  // a duplicate of the world, made at first use

  MPI_Comm control() {
    if (comm == MPI_COMM_NULL) {
      if (MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS) throw Error("MPI_Comm_dup of the world failed");
      MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    }
    return comm;
  }
};

namespace {
// MPI's wait, but with a short sleep between tests: an idle server rank then costs no core.
void wait_sleeping(MPI_Request& r, const char* what) {
  for (int done = 0;;) {
    if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) throw Error(str(what, " failed (a rank is gone?)"));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}
}  // namespace

ControlChannel::ControlChannel(const MpiRuntime* rt) : impl_(std::make_unique<Impl>()) {
  if (!rt) return;
  impl_->mpi = true;
  impl_->rank = rt->world_rank();
  impl_->size = rt->world_size();
}

ControlChannel::~ControlChannel() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (impl_->comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&impl_->comm);
}

void ControlChannel::barrier() {
  if (impl_->mpi) MPI_Barrier(MPI_COMM_WORLD);
}

void ControlChannel::broadcast(std::string& text) {
  if (!impl_->mpi || impl_->size == 1) return;
  MPI_Comm comm = impl_->control();
  uint64_t n = text.size();
  MPI_Request r;
  MPI_Ibcast(&n, 1, MPI_UINT64_T, 0, comm, &r);
  wait_sleeping(r, "the broadcast of a control message");
  text.resize(n);
  MPI_Ibcast(text.data(), static_cast<int>(n), MPI_CHAR, 0, comm, &r);
  wait_sleeping(r, "the broadcast of a control message");
}

std::vector<std::string> ControlChannel::gather(const std::string& text) {
  if (!impl_->mpi || impl_->size == 1) return {text};
  MPI_Comm comm = impl_->control();
  const int size = impl_->size;
  int n = static_cast<int>(text.size());
  std::vector<int> sizes(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  MPI_Request r;
  MPI_Igather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm, &r);
  wait_sleeping(r, "the gathering of the replicas' reports");
  std::string all;
  if (impl_->rank == 0) {
    for (int i = 1; i < size; ++i) offsets[i] = offsets[i - 1] + sizes[i - 1];
    all.resize(static_cast<size_t>(offsets.back() + sizes.back()));
  }
  MPI_Igatherv(text.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0, comm, &r);
  wait_sleeping(r, "the gathering of the replicas' reports");
  std::vector<std::string> out;
  if (impl_->rank == 0)
    for (int i = 0; i < size; ++i) out.push_back(all.substr(static_cast<size_t>(offsets[i]), static_cast<size_t>(sizes[i])));
  return out;
}

namespace {
// NCCL between distinct GPUs, MPI otherwise, from every member's device.
std::unique_ptr<Communicator> make_group_communicator(MPI_Comm group, Backend& backend, const char* what) {
  const char* forced = std::getenv("LINNET_COMM");
  std::string mine = backend.device() == Device::cuda ? "cuda:" + backend.device_id() : "cpu";
  mine.resize(96, '\0');
  int size = 0;
  MPI_Comm_size(group, &size);
  std::vector<char> all(static_cast<size_t>(size) * 96);
  if (MPI_Allgather(mine.data(), 96, MPI_CHAR, all.data(), 96, MPI_CHAR, group) != MPI_SUCCESS)
    throw Error(str("MPI_Allgather of the ", what, "' devices failed"));
  std::vector<std::string> devices;
  for (int r = 0; r < size; ++r) devices.emplace_back(all.data() + r * 96);
  if (choose_shard_comm(devices, forced ? forced : "") == ShardComm::nccl)
    return make_nccl_communicator(group, backend.device_index(), backend.stream_handle(), &backend);
  return std::make_unique<MpiCommunicator>(group, &backend);
}
}  // namespace

std::unique_ptr<Communicator> make_shard_communicator(const Groups& groups, Backend& backend) {
  return make_group_communicator(groups.shard_comm, backend, "shards");
}

std::unique_ptr<Communicator> make_pipe_communicator(const Groups& groups, Backend& backend) {
  if (groups.pipe_comm == MPI_COMM_NULL) return nullptr;
  return make_group_communicator(groups.pipe_comm, backend, "stages");
}

#else  // one rank, no MPI

struct ControlChannel::Impl {};
ControlChannel::ControlChannel(const MpiRuntime*) : impl_(std::make_unique<Impl>()) {}
ControlChannel::~ControlChannel() = default;
void ControlChannel::barrier() {}
void ControlChannel::broadcast(std::string&) {}
std::vector<std::string> ControlChannel::gather(const std::string& text) { return {text}; }

#endif

}  // namespace linnet
