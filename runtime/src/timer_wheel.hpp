// A hierarchical timer wheel: 5 levels x 64 slots, 1 ms ticks.
//
// Shape: level L has 64 slots of 64^L ticks each, so level 0 holds the next
// 64 ms tick by tick and level 4 spans 64^5 ticks (about 12.4 days). An entry
// goes to the level of the highest 6-bit group in which its deadline differs
// from `elapsed` (the wheel's current tick), in the slot that group's bits
// name; a 64-bit occupancy mask per level finds the next non-empty slot in
// O(1). When time reaches a slot's start, the slot is emptied: entries whose
// deadline has come fire, the others go down to a finer level (cascade).
// Deadlines further out than the wheel spans are placed at the furthest slot
// and cascaded again until they are due.
//
// Costs: insert and remove O(1); next_expiration O(levels); an entry is
// cascaded at most once per level. A million pending timers are a million
// 64-byte entries in their frames and nothing else.
//
// Thread-safety: none; the owner (a timer_shard) holds a lock around it.
// Design source: Volt's timer wheel, Varghese and Lauck's
// hierarchical timing wheels, Tokio's time::wheel.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <limits>

#include "spindle/detail/timer_entry.hpp"

namespace spindle::detail {

class timer_wheel {
 public:
  static constexpr unsigned levels = 5;
  static constexpr unsigned slot_bits = 6;
  static constexpr unsigned slots = 1u << slot_bits;
  static constexpr std::uint64_t never = std::numeric_limits<std::uint64_t>::max();
  /// Ticks the top level spans, less one top slot so that a clamped entry
  /// never lands in the top slot `elapsed` is in.
  static constexpr std::uint64_t max_span =
      (std::uint64_t{1} << (slot_bits * levels)) - (std::uint64_t{1} << (slot_bits * (levels - 1)));

  /// The wheel's current tick: every entry due at or before it has fired.
  [[nodiscard]] std::uint64_t elapsed() const noexcept { return elapsed_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  /// Inserts `e` (e->deadline set). Returns false, inserting nothing, when
  /// the deadline is not after elapsed(): the caller fires it.
  bool insert(timer_entry* e) noexcept {
    if (e->deadline <= elapsed_) return false;
    std::uint64_t when = e->deadline;
    if (when - elapsed_ > max_span) when = elapsed_ + max_span;
    unsigned level = level_for(elapsed_, when);
    unsigned slot = static_cast<unsigned>((when >> (level * slot_bits)) & (slots - 1));
    e->level = static_cast<std::uint8_t>(level);
    e->slot = static_cast<std::uint8_t>(slot);
    slot_list& list = lists_[level][slot];
    e->prev = nullptr;
    e->next = list.head;
    if (list.head != nullptr) list.head->prev = e;
    list.head = e;
    e->linked = true;
    occupied_[level] |= std::uint64_t{1} << slot;
    ++size_;
    return true;
  }

  /// Removes a linked entry.
  void remove(timer_entry* e) noexcept {
    slot_list& list = lists_[e->level][e->slot];
    if (e->prev != nullptr) {
      e->prev->next = e->next;
    } else {
      list.head = e->next;
    }
    if (e->next != nullptr) e->next->prev = e->prev;
    e->prev = e->next = nullptr;
    e->linked = false;
    if (list.head == nullptr) occupied_[e->level] &= ~(std::uint64_t{1} << e->slot);
    --size_;
  }

  /// The start tick of the earliest non-empty slot: no entry fires before
  /// it (an upper-level slot's start can come before its entries' deadlines;
  /// they are cascaded then). `never` when the wheel is empty.
  [[nodiscard]] std::uint64_t next_expiration() const noexcept {
    for (unsigned level = 0; level < levels; ++level) {
      if (occupied_[level] == 0) continue;
      unsigned shift = level * slot_bits;
      unsigned pos = static_cast<unsigned>((elapsed_ >> shift) & (slots - 1));
      std::uint64_t rotated = std::rotr(occupied_[level], static_cast<int>(pos));
      unsigned distance = static_cast<unsigned>(std::countr_zero(rotated));
      unsigned slot = (pos + distance) & (slots - 1);
      std::uint64_t level_range = std::uint64_t{1} << (shift + slot_bits);
      std::uint64_t level_start = elapsed_ & ~(level_range - 1);
      std::uint64_t start = level_start + (std::uint64_t{slot} << shift);
      if (pos + distance >= slots) start += level_range;  // wrapped into the next cycle
      return start;
    }
    return never;
  }

  /// Advances the wheel to tick `now`, calling `fire(entry)` (entry already
  /// unlinked) for every entry whose deadline is at or before `now`, in
  /// deadline order by slot.
  template <class Fire>
  void advance(std::uint64_t now, Fire&& fire) {
    for (;;) {
      std::uint64_t t = next_expiration();
      if (t == never || t > now) break;
      if (t > elapsed_) elapsed_ = t;
      unsigned level = 0;
      unsigned slot = 0;
      // next_expiration() picked the lowest non-empty level; find it again.
      for (; level < levels; ++level) {
        if (occupied_[level] != 0) break;
      }
      slot = static_cast<unsigned>((t >> (level * slot_bits)) & (slots - 1));
      timer_entry* e = lists_[level][slot].head;
      lists_[level][slot].head = nullptr;
      occupied_[level] &= ~(std::uint64_t{1} << slot);
      while (e != nullptr) {
        timer_entry* next = e->next;
        e->prev = e->next = nullptr;
        e->linked = false;
        --size_;
        if (!insert(e)) fire(e);  // due now, or cascaded to a finer slot
        e = next;
      }
    }
    if (now > elapsed_) elapsed_ = now;
  }

 private:
  struct slot_list {
    timer_entry* head = nullptr;
  };

  static unsigned level_for(std::uint64_t elapsed, std::uint64_t when) noexcept {
    std::uint64_t masked = (elapsed ^ when) | (slots - 1);
    unsigned significant = 63u - static_cast<unsigned>(std::countl_zero(masked));
    unsigned level = significant / slot_bits;
    return level < levels ? level : levels - 1;
  }

  std::uint64_t elapsed_ = 0;
  std::size_t size_ = 0;
  std::array<std::uint64_t, levels> occupied_{};
  std::array<std::array<slot_list, slots>, levels> lists_{};
};

}  // namespace spindle::detail
