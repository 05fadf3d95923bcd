#include "layers/model.h"

namespace linnet {

Model::Model(const ModelConfig& config, const Generics& g, WeightSource& weights, Backend& backend,
             Communicator& comm, const StagePlace& stage)
    : config_(config), g_(g), be_(backend), comm_(comm), net_(config, g, weights, backend, comm, stage),
      sampler_(backend, comm, g) {}

}  // namespace linnet
