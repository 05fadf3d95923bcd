// CheckpointDir: finds a checkpoint's weight files (in the order transformers looks for
// them) and maps each tensor name to the file holding it.
#include "checkpoint/checkpoint_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/files.h"

namespace linnet {

namespace fs = std::filesystem;

CheckpointDir::CheckpointDir(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(str(dir, ": not a directory"));
  const fs::path root(dir);
  // symlink_status: a dangling link or a symlink loop is "there" too, and opening it gives
  // the error that says what is wrong with it.
  auto present = [&](const fs::path& p) { return fs::exists(fs::symlink_status(p, ec)); };
  if (const fs::path single = root / "model.safetensors"; present(single)) {
    const SafetensorsFile& f = open(single.string());
    for (const std::string& n : f.names()) where_[n] = &f;
    return;
  }
  if (const fs::path index = root / "model.safetensors.index.json"; present(index)) {
    load_index(index.string());
    return;
  }
  // No manifest: every *.safetensors file, in name order so errors are reproducible.
  std::vector<fs::path> paths;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".safetensors" && it->is_regular_file(ec)) paths.push_back(it->path());
  if (ec) throw Error(str(dir, ": cannot list directory: ", ec.message()));
  std::sort(paths.begin(), paths.end());
  for (const fs::path& p : paths) {
    const SafetensorsFile& f = open(p.string());
    for (const std::string& n : f.names()) {
      auto [it, fresh] = where_.emplace(n, &f);
      if (!fresh) throw Error(str(dir, ": tensor '", n, "' is in both ", it->second->path(), " and ", f.path()));
    }
  }
}

const SafetensorsFile& CheckpointDir::open(const std::string& path) {
  files_.push_back(std::make_unique<SafetensorsFile>(path));
  return *files_.back();
}

void CheckpointDir::load_index(const std::string& index_path) {
  const nlohmann::json j = read_json_file(index_path, "checkpoint index");
  // Only weight_map matters; "metadata" (total_size, and sometimes non-standard extras) is
  // advisory and the shard headers are authoritative.
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(str(index_path, ": no \"weight_map\" object"));
  std::map<std::string, const SafetensorsFile*> by_name;  // shard file name → opened file
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw Error(str(index_path, ": weight_map entry for tensor '", tensor, "' is not a file name"));
    const std::string shard = file.get<std::string>();
    // Only files inside the checkpoint: no absolute paths, no "..". (Links inside it may
    // point elsewhere, as a Hugging Face cache's snapshot links point into its blobs.)
    const fs::path rel(shard);
    if (shard.empty() || rel.is_absolute() ||
        std::any_of(rel.begin(), rel.end(), [](const fs::path& part) { return part == ".."; }))
      throw Error(str(index_path, ": weight_map names file '", shard, "' (for tensor '", tensor,
                      "'): a checkpoint may only name files inside its directory"));
    auto it = by_name.find(shard);
    if (it == by_name.end()) {
      const fs::path p = fs::path(dir_) / shard;
      std::error_code ec;
      if (!fs::exists(fs::symlink_status(p, ec)))
        throw Error(str(index_path, ": weight_map names file '", shard, "' (for tensor '", tensor, "'), but ",
                        p.string(), " does not exist"));
      it = by_name.emplace(shard, &open(p.string())).first;
    }
    if (!it->second->has(tensor))
      throw Error(str(index_path, ": tensor '", tensor, "' is listed in ", it->second->path(),
                      ", but that file has no such tensor"));
    where_[tensor] = it->second;
  }
}

std::vector<std::string> CheckpointDir::names() const {
  std::vector<std::string> out;
  for (const auto& kv : where_) out.push_back(kv.first);
  return out;
}

const SafetensorsFile& CheckpointDir::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(str(dir_, ": checkpoint has no tensor '", name, "'"));
  return *it->second;
}

const std::string& CheckpointDir::stored(const std::string& name) const {
  auto it = stored_.find(name);
  return it == stored_.end() ? name : it->second;
}

const TensorInfo& CheckpointDir::info(const std::string& name) const { return file_of(name).info(stored(name)); }
Tensor CheckpointDir::view(const std::string& name) const { return file_of(name).view(stored(name)); }
Tensor CheckpointDir::read(const std::string& name) const { return file_of(name).read(stored(name)); }
Tensor CheckpointDir::read_rows(const std::string& name, int64_t begin, int64_t end) const {
  return file_of(name).read_rows(stored(name), begin, end);
}
Tensor CheckpointDir::read_cols(const std::string& name, int64_t begin, int64_t end) const {
  return file_of(name).read_cols(stored(name), begin, end);
}

void CheckpointDir::expect(const std::string& name, const Shape& shape) const {
  const SafetensorsFile& f = file_of(name);
  const TensorInfo& ti = f.info(stored(name));
  if (ti.shape != shape)
    throw Error(str(f.path(), ": tensor '", stored(name), "' has shape ", ti.shape.to_string(), ", expected ",
                    shape.to_string()));
}

Tensor CheckpointDir::read_block(const std::string& name, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                 int64_t cols) const {
  return file_of(name).read_block(stored(name), r0, r1, c0, c1, cols);
}

void CheckpointDir::expect_2d(const std::string& name, const Shape& shape) const {
  const SafetensorsFile& f = file_of(name);
  const Shape& s = f.info(stored(name)).shape;
  int64_t cols = 1;  // the product of trailing dimensions that reaches shape[1], if one does
  for (size_t d = s.rank(); d-- > 1 && shape.rank() == 2 && cols < shape[1];) cols *= s[d];
  if (s.rank() < 2 || shape.rank() != 2 || cols != shape[1] || s.numel() != shape.numel())
    throw Error(str(f.path(), ": tensor '", stored(name), "' has shape ", s.to_string(), ", expected ",
                    shape.to_string(), s.rank() > 2 ? " (its rows: every dimension but the last)" : ""));
}

void CheckpointDir::expect(const std::string& name, const Shape& shape, DType dtype) const {
  expect(name, shape);
  const SafetensorsFile& f = file_of(name);
  const DType actual = f.info(stored(name)).dtype;
  if (actual != dtype)
    throw Error(str(f.path(), ": tensor '", stored(name), "' has dtype ", dtype_name(actual), ", expected ",
                    dtype_name(dtype)));
}

int64_t CheckpointDir::keep_text_model() {
  // transformers saves Mistral 3's text model under language_model.model.* and
  // language_model.lm_head.*; its modules (and checkpoints written from them) say
  // model.language_model.* and lm_head.*.
  static const std::pair<const char*, const char*> kRenames[] = {
      {"language_model.model.", "model."}, {"language_model.lm_head.", "lm_head."}, {"model.language_model.", "model."}};
  std::map<std::string, const SafetensorsFile*> text;
  std::map<std::string, std::string> stored;
  int64_t set_aside = 0;
  for (const auto& [name, file] : where_) {
    std::string as = name.starts_with("lm_head.") ? name : "";
    for (const auto& [from, to] : kRenames)
      if (name.starts_with(from)) as = to + name.substr(std::string(from).size());
    if (as.empty()) {
      ++set_aside;
      continue;
    }
    if (!text.emplace(as, file).second)
      throw Error(str(dir_, ": tensors '", stored.count(as) ? stored[as] : as, "' and '", name, "' are both the text "
                      "model's '", as, "'"));
    if (as != name) stored[as] = name;
  }
  where_ = std::move(text);
  stored_ = std::move(stored);
  return set_aside;
}

}  // namespace linnet
