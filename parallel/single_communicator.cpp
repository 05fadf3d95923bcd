#include <cstring>

#include "parallel/communicator.h"

namespace linnet {

void SingleCommunicator::all_gather(const Tensor& local, Tensor& out) {
  LINNET_CHECK(out.nbytes() == local.nbytes() && out.device() == Device::cpu && local.device() == Device::cpu,
               "single all_gather of ", local.describe(), " into ", out.describe());
  std::memcpy(out.data(), local.data(), local.nbytes());
}

void SingleCommunicator::all_to_all(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                                    const std::vector<int64_t>& recv_rows) {
  LINNET_CHECK(send_rows.size() == 1 && recv_rows == send_rows && send.nbytes() == recv.nbytes() &&
                   send.dtype() == recv.dtype(),
               "single all_to_all of ", send.describe(), " into ", recv.describe());
  if (send.data() == recv.data() || send.nbytes() == 0) return;
  LINNET_CHECK(send.device() == Device::cpu && recv.device() == Device::cpu, "single all_to_all of device tensors ",
               send.describe(), " into ", recv.describe(), " (one rank keeps its rows where they are)");
  std::memcpy(recv.data(), send.data(), send.nbytes());
}

}  // namespace linnet
