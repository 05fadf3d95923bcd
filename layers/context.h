// What a layer's forward needs besides its inputs: where ops run and whom it talks to.
#pragma once
#include "core/backend.h"
#include "parallel/communicator.h"

namespace linnet {

struct Context {
  Backend& backend;
  Communicator& comm;  // the shard group of this model replica
};

}  // namespace linnet
