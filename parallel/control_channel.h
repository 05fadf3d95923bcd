// The job's control messages, apart from the model's collectives: `linnet serve`'s step plans
// from world rank 0 to every rank and the replicas' reports back, and the barriers of the
// batch commands' output files. Over the MPI world (a duplicate communicator, on the host,
// whatever the shards use); waiting ranks poll with short sleeps, so an idle server does not
// spin its cores. One rank alone: every call is the identity.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace linnet {

class MpiRuntime;
class Backend;
class Communicator;
struct Groups;

class ControlChannel {
 public:
  // rt: the MPI runtime (nullptr: one rank, no MPI).
  explicit ControlChannel(const MpiRuntime* rt);
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  // Every rank of the job waits here.
  void barrier();
  // World rank 0's `text` to every rank.
  void broadcast(std::string& text);
  // Every rank's text, in world-rank order, on world rank 0 (an empty list elsewhere).
  std::vector<std::string> gather(const std::string& text);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The communicator of a replica's shards (groups.shard_comm): NCCL between distinct GPUs,
// MPI otherwise (parallel/comm_choice.h), chosen once for the group from every shard's
// device; LINNET_COMM=mpi|nccl forces. Collective over the shard group.
std::unique_ptr<Communicator> make_shard_communicator(const Groups& groups, Backend& backend);
// The communicator of a shard's pipeline stages (groups.pipe_comm; rank = stage), chosen alike;
// null without stages. Collective over the pipe group.
std::unique_ptr<Communicator> make_pipe_communicator(const Groups& groups, Backend& backend);

}  // namespace linnet
