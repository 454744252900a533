#include "line_buffer.hpp"

#include <cstring>

namespace scan {

line_buffer::line_buffer(std::size_t capacity)
    : data_(std::make_unique_for_overwrite<char[]>(capacity == 0 ? 1 : capacity)),
      initial_capacity_(capacity == 0 ? 1 : capacity),
      capacity_(initial_capacity_) {}

std::span<char> line_buffer::space() {
  if (begin_ > 0) {
    std::size_t const keep = end_ - begin_;
    if (keep > 0) std::memmove(data_.get(), data_.get() + begin_, keep);
    begin_ = 0;
    end_ = keep;
  }
  if (end_ == capacity_) {  // one line fills the whole buffer: grow
    auto bigger = std::make_unique_for_overwrite<char[]>(capacity_ * 2);
    std::memcpy(bigger.get(), data_.get(), end_);
    data_ = std::move(bigger);
    capacity_ *= 2;
  }
  return {data_.get() + end_, capacity_ - end_};
}

std::string_view line_buffer::take_lines() noexcept {
  std::size_t const size = end_ - begin_;
  if (size == 0) return {};
  void const* nl = memrchr(data_.get() + begin_, '\n', size);
  if (nl == nullptr) return {};
  std::size_t const stop = static_cast<std::size_t>(static_cast<char const*>(nl) - data_.get()) + 1;
  std::string_view lines(data_.get() + begin_, stop - begin_);
  begin_ = stop;
  return lines;
}

std::string_view line_buffer::take_rest() noexcept {
  std::string_view rest(data_.get() + begin_, end_ - begin_);
  begin_ = end_;
  return rest;
}

void line_buffer::reset(std::size_t keep_limit) {
  begin_ = 0;
  end_ = 0;
  if (capacity_ > keep_limit && capacity_ > initial_capacity_) {
    data_ = std::make_unique_for_overwrite<char[]>(initial_capacity_);
    capacity_ = initial_capacity_;
  }
}

}  // namespace scan
