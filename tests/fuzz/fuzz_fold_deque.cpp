// libFuzzer target: a tree fold's split deque
// (runtime/include/spindle/detail/fold_deque.hpp) against a model.
//
// Input: the first byte picks where the deque's u32 positions start (0, or
// near the wrap-around); each further byte is an operation: push a burst of
// 1..256 new items (the ring grows past 256 entries), pop, pop a run, steal,
// share(n), and the two steps of a stalled thief's steal apart (read the
// word and the oldest public item; later, take it if the word has not
// changed), with up to three stalled thieves at once while the owner pushes,
// pops, shares and reclaims in between.
//
// The model: the items from top to bottom, how many of them are public
// (the rest private), the thieves' request flag and the count of steals.
// Its rules: a pop first shares the older half of the private items when a
// thief asked and there are at least two (the request then clears); it
// takes the newest private item; with none, it takes back the newer half of
// the public items (the older floor(n/2) stay) or, with one left, that one;
// with none, nothing. A steal takes the oldest public item; with none it
// asks. share(n) makes the n oldest private items public.
//
// Checked after every operation: every item that comes out is the one the
// model names, size() and stolen() equal the model's; a stalled thief's
// take succeeds exactly when top and split are what it read, and then it
// returns the item the model holds oldest: an item taken or reused since
// the thief read it never comes out again (no ABA). At the end the owner
// drains the deque: every item pushed came out exactly once.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "spindle/detail/fold_deque.hpp"

namespace spindle::detail {

struct fold_deque_test_access {
  template <class T>
  static void start_at(fold_deque<T>& d, std::uint32_t pos) {
    d.word_.store(fold_deque<T>::pack(pos, pos), std::memory_order_relaxed);
    d.bottom_ = pos;
    d.split_ = pos;
    d.top_seen_ = pos;
    d.own_takes_ = pos;  // stolen() counts from here
  }
  template <class T>
  static auto steal_read(fold_deque<T>& d) {
    return d.steal_read();
  }
  template <class T, class A>
  static T* steal_commit(fold_deque<T>& d, A a) {
    return d.steal_commit(a);
  }
  template <class T>
  static std::uint64_t word(fold_deque<T> const& d) {
    return d.word_.load(std::memory_order_relaxed);
  }
};

}  // namespace spindle::detail

namespace {

using access = spindle::detail::fold_deque_test_access;
using deque = spindle::detail::fold_deque<std::uint32_t>;
constexpr long long none = -1;

[[noreturn]] void fail(char const* what, long long got, long long want) {
  std::fprintf(stderr, "fuzz_fold_deque: %s: got %lld, want %lld\n", what, got, want);
  std::abort();
}

void expect_eq(char const* what, long long got, long long want) {
  if (got != want) fail(what, got, want);
}

class harness {
 public:
  explicit harness(std::uint32_t start) : top_(start) { access::start_at(d_, start); }

  void run(std::uint8_t const* data, std::size_t size) {
    std::size_t i = 0;
    auto next = [&]() -> std::uint8_t { return i < size ? data[i++] : 0; };
    while (i < size) {
      std::uint8_t op = next();
      switch (op % 8) {
        case 0:
          push(1 + next());
          break;
        case 1:
          pop();
          break;
        case 2:
          for (int k = 0, n = next(); k < n; ++k)
            if (!pop()) break;
          break;
        case 3:
          steal();
          break;
        case 4:
          share(next());
          break;
        case 5:
          stall(op >> 3);
          break;
        case 6:
          resume(op >> 3);
          break;
        default:
          for (int k = 0, n = (op >> 3) % 8; k < n; ++k)
            steal();
          break;
      }
      check();
    }
    for (int k = 0; k < 3; ++k)
      resume(static_cast<std::uint8_t>(k));
    while (pop()) {
    }
    check();
    expect_eq("items left in the model", static_cast<long long>(items_.size()), 0);
    for (std::size_t id = 0; id < out_.size(); ++id)
      expect_eq("times an item came out", out_[id], 1);
  }

 private:
  struct stalled {
    std::uint32_t top;
    std::uint32_t split;
    std::uint32_t* item;
    decltype(access::steal_read(std::declval<deque&>())) attempt;
  };

  long long id_of(std::uint32_t const* p) const { return p == nullptr ? none : *p; }

  void came_out(long long id) {
    if (id == none) return;
    if (out_[static_cast<std::size_t>(id)]++ != 0) fail("an item came out twice", id, none);
  }

  void push(int n) {
    for (int k = 0; k < n && ids_.size() < (1u << 16); ++k) {
      ids_.push_back(std::make_unique<std::uint32_t>(static_cast<std::uint32_t>(ids_.size())));
      out_.push_back(0);
      d_.push(ids_.back().get());
      items_.push_back(*ids_.back());
    }
  }

  [[nodiscard]] std::size_t private_count() const { return items_.size() - public_; }

  bool pop() {
    if (want_ && private_count() >= 2) {
      want_ = false;
      public_ += private_count() / 2;
    }
    long long want = none;
    if (private_count() > 0) {
      want = items_.back();
      items_.pop_back();
    } else if (public_ == 1) {
      want = items_.front();
      items_.pop_front();
      public_ = 0;
      ++top_;
    } else if (public_ > 1) {
      public_ /= 2;  // the older floor(n/2) stay public
      want = items_.back();
      items_.pop_back();
    }
    long long got = id_of(d_.pop());
    expect_eq("pop", got, want);
    came_out(got);
    return got != none;
  }

  void steal() {
    long long want = none;
    if (public_ == 0) {
      want_ = true;
    } else {
      want = items_.front();
      items_.pop_front();
      --public_;
      ++top_;
      ++stolen_;
    }
    long long got = id_of(d_.steal());
    expect_eq("steal", got, want);
    came_out(got);
  }

  void share(std::size_t n) {
    if (n > private_count()) n = private_count();
    public_ += n;
    d_.share(static_cast<std::uint32_t>(n));
  }

  void stall(std::uint8_t k) {
    auto& slot = stalled_[k % 3];
    if (slot) return;
    auto a = access::steal_read(d_);
    if (public_ == 0) {
      want_ = true;
      expect_eq("a stalled thief read an item with nothing public", id_of(a.item), none);
      return;
    }
    expect_eq("a stalled thief's read", id_of(a.item), items_.front());
    slot = stalled{top_, top_ + static_cast<std::uint32_t>(public_), a.item, a};
  }

  void resume(std::uint8_t k) {
    auto& slot = stalled_[k % 3];
    if (!slot) return;
    bool const same =
        slot->top == top_ && slot->split == top_ + static_cast<std::uint32_t>(public_);
    long long got = id_of(access::steal_commit(d_, slot->attempt));
    if (!same) {
      expect_eq("a stalled thief took an item after the word changed", got, none);
    } else {
      expect_eq("a stalled thief's take", got, items_.front());
      expect_eq("the item it read", id_of(slot->item), got);
      items_.pop_front();
      --public_;
      ++top_;
      ++stolen_;
    }
    came_out(got);
    slot.reset();
  }

  void check() {
    expect_eq("size", static_cast<long long>(d_.size()), static_cast<long long>(items_.size()));
    expect_eq("stolen", d_.stolen(), stolen_);
    std::uint64_t w = access::word(d_);
    expect_eq("top", static_cast<std::uint32_t>(w), top_);
    expect_eq("split", static_cast<std::uint32_t>(w >> 32),
              static_cast<std::uint32_t>(top_ + public_));
  }

  deque d_;
  std::vector<std::unique_ptr<std::uint32_t>> ids_;
  std::vector<int> out_;
  std::deque<std::uint32_t> items_;  // the model: top first
  std::size_t public_ = 0;
  bool want_ = false;
  std::uint32_t top_;
  long long stolen_ = 0;
  std::optional<stalled> stalled_[3];
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size == 0) return 0;
  std::uint32_t start = data[0] % 2 == 0 ? 0u : 0xffffff00u + data[0];
  harness h(start);
  h.run(data + 1, size - 1);
  return 0;
}
