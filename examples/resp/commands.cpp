#include "commands.hpp"

#include <array>
#include <charconv>
#include <climits>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include "reply.hpp"

namespace resp {

namespace {

using args = std::span<std::string_view const>;

// Redis's shared error replies.
constexpr std::string_view kNotInteger = "ERR value is not an integer or out of range";
constexpr std::string_view kOverflow = "ERR increment or decrement would overflow";
constexpr std::string_view kSyntax = "ERR syntax error";

// The text of `s` up to its first NUL byte: what Redis's printf("%s") and
// strcasecmp see of an argument.
std::string_view c_string(std::string_view s) noexcept {
  std::size_t const nul = s.find('\0');
  return nul == std::string_view::npos ? s : s.substr(0, nul);
}

bool equals_nocase(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t k = 0; k < a.size(); ++k) {
    unsigned char x = static_cast<unsigned char>(a[k]);
    unsigned char y = static_cast<unsigned char>(b[k]);
    if (x >= 'A' && x <= 'Z') x = static_cast<unsigned char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<unsigned char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

void arity_error(std::string_view name, std::string& out) {
  std::string text = "ERR wrong number of arguments for '";
  text += name;
  text += "' command";
  reply::error(out, text);
}

after_reply ping(keyspace& /*keys*/, args argv, std::string& out) {
  if (argv.size() > 2) {
    arity_error("ping", out);
  } else if (argv.size() == 1) {
    reply::simple(out, "PONG");
  } else {
    reply::bulk(out, argv[1]);
  }
  return after_reply::keep_open;
}

after_reply echo(keyspace& /*keys*/, args argv, std::string& out) {
  reply::bulk(out, argv[1]);
  return after_reply::keep_open;
}

after_reply quit(keyspace& /*keys*/, args /*argv*/, std::string& out) {
  reply::simple(out, "OK");
  return after_reply::close;
}

// SET key value [NX | XX] [GET]: the option loop of Redis's
// parseExtendedStringArgumentsOrReply, without the expiry options.
after_reply set(keyspace& keys, args argv, std::string& out) {
  bool nx = false;
  bool xx = false;
  bool get = false;
  for (std::size_t k = 3; k < argv.size(); ++k) {
    std::string_view const opt = c_string(argv[k]);
    if (equals_nocase(opt, "nx") && !xx) {
      nx = true;
    } else if (equals_nocase(opt, "xx") && !nx) {
      xx = true;
    } else if (equals_nocase(opt, "get")) {
      get = true;
    } else {
      reply::error(out, kSyntax);
      return after_reply::keep_open;
    }
  }
  keys.with_shard(argv[1], [&](keyspace::map& map) {
    auto const it = map.find(argv[1]);
    bool const found = it != map.end();
    if (get) {
      if (found) {
        reply::bulk(out, it->second);
      } else {
        reply::null_bulk(out);
      }
    }
    if ((nx && found) || (xx && !found)) {
      if (!get) reply::null_bulk(out);
      return;
    }
    if (found) {
      it->second.assign(argv[2]);
    } else {
      map.emplace(std::string(argv[1]), std::string(argv[2]));
    }
    if (!get) reply::simple(out, "OK");
  });
  return after_reply::keep_open;
}

after_reply get(keyspace& keys, args argv, std::string& out) {
  keys.with_shard(argv[1], [&](keyspace::map& map) {
    auto const it = map.find(argv[1]);
    if (it == map.end()) {
      reply::null_bulk(out);
    } else {
      reply::bulk(out, it->second);
    }
  });
  return after_reply::keep_open;
}

after_reply del(keyspace& keys, args argv, std::string& out) {
  long long removed = 0;
  for (std::size_t k = 1; k < argv.size(); ++k) {
    removed += keys.with_shard(argv[k], [&](keyspace::map& map) -> long long {
      auto const it = map.find(argv[k]);
      if (it == map.end()) return 0;
      map.erase(it);
      return 1;
    });
  }
  reply::integer(out, removed);
  return after_reply::keep_open;
}

after_reply exists(keyspace& keys, args argv, std::string& out) {
  long long found = 0;
  for (std::size_t k = 1; k < argv.size(); ++k) {
    found += keys.with_shard(
        argv[k], [&](keyspace::map& map) -> long long { return map.contains(argv[k]) ? 1 : 0; });
  }
  reply::integer(out, found);
  return after_reply::keep_open;
}

// Redis's incrDecrCommand: the stored value must be an integer, and the sum
// must not overflow; a missing key counts as 0.
void add_to(keyspace& keys, std::string_view key, long long increment, std::string& out) {
  keys.with_shard(key, [&](keyspace::map& map) {
    auto it = map.find(key);
    long long value = 0;
    if (it != map.end() && !parse_integer(it->second, value)) {
      reply::error(out, kNotInteger);
      return;
    }
    if ((increment < 0 && value < 0 && increment < LLONG_MIN - value) ||
        (increment > 0 && value > 0 && increment > LLONG_MAX - value)) {
      reply::error(out, kOverflow);
      return;
    }
    value += increment;
    char digits[24];
    auto const result = std::to_chars(digits, digits + sizeof digits, value);
    std::string_view const text(digits, static_cast<std::size_t>(result.ptr - digits));
    if (it == map.end()) {
      map.emplace(std::string(key), std::string(text));
    } else {
      it->second.assign(text);
    }
    reply::integer(out, value);
  });
}

after_reply incr(keyspace& keys, args argv, std::string& out) {
  add_to(keys, argv[1], 1, out);
  return after_reply::keep_open;
}

after_reply decr(keyspace& keys, args argv, std::string& out) {
  add_to(keys, argv[1], -1, out);
  return after_reply::keep_open;
}

after_reply incrby(keyspace& keys, args argv, std::string& out) {
  long long increment = 0;
  if (!parse_integer(argv[2], increment)) {
    reply::error(out, kNotInteger);
  } else {
    add_to(keys, argv[1], increment, out);
  }
  return after_reply::keep_open;
}

after_reply decrby(keyspace& keys, args argv, std::string& out) {
  long long decrement = 0;
  if (!parse_integer(argv[2], decrement)) {
    reply::error(out, kNotInteger);
  } else if (decrement == LLONG_MIN) {
    reply::error(out, "ERR decrement would overflow");
  } else {
    add_to(keys, argv[1], -decrement, out);
  }
  return after_reply::keep_open;
}

// A command: its name as Redis prints it in errors (lower case), its arity
// (Redis's convention: n = exactly n words with the name, -n = at least n)
// and its implementation.
struct command {
  std::string_view name;
  int arity;
  after_reply (*run)(keyspace&, args, std::string&);
};

constexpr std::array kCommands{
    command{"get", 2, get},       command{"set", -3, set},   command{"ping", -1, ping},
    command{"echo", 2, echo},     command{"del", -2, del},   command{"exists", -2, exists},
    command{"incr", 2, incr},     command{"decr", 2, decr},  command{"incrby", 3, incrby},
    command{"decrby", 3, decrby}, command{"quit", -1, quit},
};

command const* find_command(std::string_view name) noexcept {
  for (command const& c : kCommands) {
    if (equals_nocase(name, c.name)) return &c;
  }
  return nullptr;
}

// Redis 7.0's processCommand text for an unknown command: the name and the
// first arguments, each at most 128 bytes, the arguments 128 bytes in all
// (as printf's "%.*s" prints them: up to a NUL byte).
void unknown_command(args argv, std::string& out) {
  std::string text = "ERR unknown command '";
  text += c_string(argv[0]).substr(0, 128);
  text += "', with args beginning with: ";
  std::string listed;
  for (std::size_t k = 1; k < argv.size() && listed.size() < 128; ++k) {
    std::size_t const room = 128 - listed.size();  // "'%.*s' " with 128 - sdslen(args)
    listed += '\'';
    listed += c_string(argv[k]).substr(0, room);
    listed += "' ";
  }
  text += listed;
  reply::error(out, text);
}

}  // namespace

bool parse_integer(std::string_view text, long long& value) noexcept {
  // Redis's string2ll, with its limits: at most 20 characters, "0" alone,
  // otherwise an optional '-' and a first digit 1-9.
  if (text.empty() || text.size() >= 21) return false;
  if (text == "0") {
    value = 0;
    return true;
  }
  std::size_t k = 0;
  bool const negative = text[0] == '-';
  if (negative) {
    ++k;
    if (k == text.size()) return false;
  }
  if (text[k] < '1' || text[k] > '9') return false;
  unsigned long long v = 0;
  for (; k < text.size(); ++k) {
    char const c = text[k];
    if (c < '0' || c > '9') return false;
    unsigned const digit = static_cast<unsigned>(c - '0');
    if (v > ULLONG_MAX / 10) return false;
    v *= 10;
    if (v > ULLONG_MAX - digit) return false;
    v += digit;
  }
  if (negative) {
    if (v > static_cast<unsigned long long>(LLONG_MAX) + 1) return false;
    value = v == static_cast<unsigned long long>(LLONG_MAX) + 1 ? LLONG_MIN
                                                                : -static_cast<long long>(v);
  } else {
    if (v > static_cast<unsigned long long>(LLONG_MAX)) return false;
    value = static_cast<long long>(v);
  }
  return true;
}

after_reply execute(keyspace& keys, std::span<std::string_view const> argv, std::string& out) {
  command const* const c = find_command(argv[0]);
  if (c == nullptr) {
    unknown_command(argv, out);
    return after_reply::keep_open;
  }
  auto const argc = static_cast<long long>(argv.size());
  if ((c->arity > 0 && argc != c->arity) || argc < -c->arity) {
    arity_error(c->name, out);
    return after_reply::keep_open;
  }
  return c->run(keys, argv, out);
}

}  // namespace resp
