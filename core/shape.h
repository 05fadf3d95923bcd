// A tensor's dimensions, outermost first.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace linnet {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  size_t rank() const { return dims_.size(); }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t& operator[](size_t i) { return dims_[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : dims_) n *= d;
    return n;
  }
  const std::vector<int64_t>& dims() const { return dims_; }
  bool operator==(const Shape&) const = default;
  // "[2, 3]"
  std::string to_string() const;

 private:
  std::vector<int64_t> dims_;
};

}  // namespace linnet
