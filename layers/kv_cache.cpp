#include "layers/kv_cache.h"

namespace linnet {

KvCache::KvCache(Backend& backend, const std::vector<LayerCacheSpec>& specs, int64_t batch, int64_t max_seq,
                 DType dtype, int64_t state_rows)
    : specs_(specs), layers_(specs.size()) {
  for (size_t i = 0; i < specs.size(); ++i) {
    const LayerCacheSpec& s = specs[i];
    if (s.kind == LayerCacheSpec::Kind::none) continue;
    if (s.kind == LayerCacheSpec::Kind::recurrent) {
      layers_[i].conv = backend.zeros({state_rows, s.conv_channels, s.conv_kept}, DType::f32);
      layers_[i].delta = backend.zeros({state_rows, s.delta.value_heads, s.delta.key_dim, s.delta.value_dim}, DType::f32);
      continue;
    }
    if (s.kind == LayerCacheSpec::Kind::latent) {
      // One KV head whose keys are its values (layers/latent_attention.h): one tensor, both names.
      layers_[i].k = backend.zeros({batch, 1, max_seq, s.dim}, dtype);
      layers_[i].v = layers_[i].k;
      continue;
    }
    layers_[i].k = backend.zeros({batch, s.heads, max_seq, s.dim}, dtype);
    layers_[i].v = backend.zeros({batch, s.heads, max_seq, s.dim}, dtype);
  }
}

int64_t KvCache::bytes() const {
  int64_t n = 0;
  for (const auto& l : layers_)
    for (const Tensor* t : {&l.k, &l.v, &l.conv, &l.delta})
      if (t->defined() && !(t == &l.v && l.v.data() == l.k.data())) n += static_cast<int64_t>(t->nbytes());
  return n;
}

std::vector<Tensor> KvCache::snapshot(Backend& backend) const {
  std::vector<Tensor> out;
  for (const auto& l : layers_) {
    for (const Tensor* t : {&l.k, &l.v, &l.conv, &l.delta})
      if (t->defined() && !(t == &l.v && l.v.data() == l.k.data())) out.push_back(backend.to_host(*t).clone());
  }
  return out;
}

}  // namespace linnet
