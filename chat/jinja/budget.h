// What one render may still spend (jinja::Limits): the evaluator counts its steps here, and
// the code that builds strings and lists measures them here before (or as) it builds them, so
// that no template runs or grows without bound. Template::render installs its budget on the
// calling thread for the render's duration (budget::Scope); outside a render nothing is
// counted or refused.
#pragma once
#include <cstddef>
#include <cstdint>

#include "chat/jinja/jinja.h"

namespace linnet::jinja::budget {

// The installed limits for the scope's lifetime (a render inside a render gets its own).
class Scope {
 public:
  explicit Scope(const Limits& limits);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const Limits& limits_;
  std::int64_t steps_ = 0, next_poll_ = 0;
  Scope* outer_;
  friend void steps(std::int64_t n);
  friend void check_text(std::size_t bytes);
  friend void check_items(std::size_t count);
};

// n steps of work (a statement, an expression, a loop iteration, an item a filter visits);
// EvalError past Limits::max_steps, Cancelled when the cancel check says so.
void steps(std::int64_t n = 1);
// A string of `bytes` is about to exist: EvalError past Limits::max_bytes. Builders call it
// as they grow (or with the size they will reach) so that nothing much larger is allocated.
void check_text(std::size_t bytes);
// Bytes of values made (text, list items, dict entries): their cost in steps, one per 16
// bytes, which also bounds what a render can hold.
void built(std::size_t bytes);
// Text that was built or grown to `size` bytes, `added` of them new: check_text(size) and
// built(added).
void built_text(std::size_t size, std::size_t added);
inline void built_text(std::size_t size) { built_text(size, size); }
// A list of `count` items is about to exist: EvalError when count × sizeof(Value) passes
// Limits::max_bytes.
void check_items(std::size_t count);

// a × b, or the largest size_t when that does not fit: a size to check, not to allocate.
inline std::size_t product(std::size_t a, std::size_t b) { return b && a > SIZE_MAX / b ? SIZE_MAX : a * b; }

}  // namespace linnet::jinja::budget
