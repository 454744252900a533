// spindle-resp's command layer without sockets: the commands and their
// replies (redis-server 7.0's texts), the arity and unknown-command errors,
// INCR's integer rules and overflow, hiredis-parsed arrays and inline
// requests, pipelined batches, input split at every byte, protocol errors,
// the limits, the keyspace's sharding under threads, and the command line.
#include <gtest/gtest.h>

#include <climits>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "keyspace.hpp"
#include "session.hpp"

namespace {

using resp::after_reply;

// The pieces one after the other. (Not operator+ on a literal and a
// std::string: GCC 12 warns -Wrestrict in it at -O3, a false positive.)
std::string cat(std::initializer_list<std::string_view> pieces) {
  std::string out;
  for (std::string_view p : pieces)
    out += p;
  return out;
}

// A request as a RESP array of bulk strings.
std::string array(std::initializer_list<std::string_view> words) {
  std::string out = cat({"*", std::to_string(words.size()), "\r\n"});
  for (std::string_view w : words)
    out += cat({"$", std::to_string(w.size()), "\r\n", w, "\r\n"});
  return out;
}

// Runs one command directly and returns its reply.
std::string run(resp::keyspace& keys, std::initializer_list<std::string_view> words) {
  std::vector<std::string_view> argv(words);
  std::string out;
  resp::execute(keys, argv, out);
  return out;
}

std::string bulk(std::string_view s) {
  return cat({"$", std::to_string(s.size()), "\r\n", s, "\r\n"});
}

// Feeds `input` to a fresh session in one piece.
std::string feed_all(resp::keyspace& keys, std::string_view input, after_reply* next = nullptr) {
  resp::session s(keys);
  std::string out;
  after_reply const r = s.feed(input, out);
  if (next != nullptr) *next = r;
  return out;
}

TEST(RespCommands, Ping) {
  resp::keyspace keys;
  EXPECT_EQ(run(keys, {"PING"}), "+PONG\r\n");
  EXPECT_EQ(run(keys, {"ping", "hello world"}), bulk("hello world"));
  EXPECT_EQ(run(keys, {"PiNg", ""}), bulk(""));
  EXPECT_EQ(run(keys, {"ping", "a", "b"}), "-ERR wrong number of arguments for 'ping' command\r\n");
}

TEST(RespCommands, Echo) {
  resp::keyspace keys;
  EXPECT_EQ(run(keys, {"ECHO", "x"}), bulk("x"));
  std::string const binary("a\0b\r\n\xff", 6);
  EXPECT_EQ(run(keys, {"echo", binary}), bulk(binary));
  EXPECT_EQ(run(keys, {"echo"}), "-ERR wrong number of arguments for 'echo' command\r\n");
  EXPECT_EQ(run(keys, {"echo", "a", "b"}), "-ERR wrong number of arguments for 'echo' command\r\n");
}

TEST(RespCommands, SetGetDelExists) {
  resp::keyspace keys;
  EXPECT_EQ(run(keys, {"GET", "k"}), "$-1\r\n");
  EXPECT_EQ(run(keys, {"SET", "k", "v"}), "+OK\r\n");
  EXPECT_EQ(run(keys, {"GET", "k"}), bulk("v"));
  EXPECT_EQ(run(keys, {"SET", "k", ""}), "+OK\r\n");
  EXPECT_EQ(run(keys, {"GET", "k"}), bulk(""));
  std::string const binary("\0\r\n\x80", 4);
  EXPECT_EQ(run(keys, {"SET", binary, binary}), "+OK\r\n");
  EXPECT_EQ(run(keys, {"GET", binary}), bulk(binary));
  EXPECT_EQ(run(keys, {"EXISTS", "k", "k", "nope", binary}), ":3\r\n");
  EXPECT_EQ(run(keys, {"DEL", "k", "k", "nope"}), ":1\r\n");
  EXPECT_EQ(run(keys, {"EXISTS", "k"}), ":0\r\n");
  EXPECT_EQ(run(keys, {"DEL", binary}), ":1\r\n");
  EXPECT_EQ(keys.size(), 0u);
  std::string const big(1 << 20, 'x');
  EXPECT_EQ(run(keys, {"SET", "big", big}), "+OK\r\n");
  EXPECT_EQ(run(keys, {"GET", "big"}), bulk(big));
}

TEST(RespCommands, SetOptions) {
  resp::keyspace keys;
  EXPECT_EQ(run(keys, {"SET", "k", "1", "XX"}), "$-1\r\n");
  EXPECT_EQ(run(keys, {"SET", "k", "1", "nx"}), "+OK\r\n");
  EXPECT_EQ(run(keys, {"SET", "k", "2", "NX"}), "$-1\r\n");
  EXPECT_EQ(run(keys, {"SET", "k", "3", "xx", "get"}), bulk("1"));
  EXPECT_EQ(run(keys, {"SET", "n", "3", "GET"}), "$-1\r\n");
  EXPECT_EQ(run(keys, {"SET", "k", "4", "NX", "GET"}), bulk("3"));  // not set
  EXPECT_EQ(run(keys, {"GET", "k"}), bulk("3"));
  EXPECT_EQ(run(keys, {"SET", "k", "v", "NX", "XX"}), "-ERR syntax error\r\n");
  EXPECT_EQ(run(keys, {"SET", "k", "v", "EX", "10"}), "-ERR syntax error\r\n");
  EXPECT_EQ(run(keys, {"SET", "k", "v", "bogus"}), "-ERR syntax error\r\n");
  EXPECT_EQ(run(keys, {"SET", "k"}), "-ERR wrong number of arguments for 'set' command\r\n");
  EXPECT_EQ(run(keys, {"GET", "k"}), bulk("3"));
}

TEST(RespCommands, Arity) {
  resp::keyspace keys;
  for (std::string_view name : {"get", "incr", "decr"}) {
    std::string const expected =
        cat({"-ERR wrong number of arguments for '", name, "' command\r\n"});
    EXPECT_EQ(run(keys, {name}), expected);
    EXPECT_EQ(run(keys, {name, "a", "b"}), expected);
  }
  EXPECT_EQ(run(keys, {"GET", "a", "b"}), "-ERR wrong number of arguments for 'get' command\r\n");
  EXPECT_EQ(run(keys, {"DEL"}), "-ERR wrong number of arguments for 'del' command\r\n");
  EXPECT_EQ(run(keys, {"EXISTS"}), "-ERR wrong number of arguments for 'exists' command\r\n");
  EXPECT_EQ(run(keys, {"INCRBY", "k"}), "-ERR wrong number of arguments for 'incrby' command\r\n");
}

TEST(RespCommands, UnknownCommand) {
  resp::keyspace keys;
  EXPECT_EQ(run(keys, {"FOO"}), "-ERR unknown command 'FOO', with args beginning with: \r\n");
  EXPECT_EQ(run(keys, {"foo", "a", "b c"}),
            "-ERR unknown command 'foo', with args beginning with: 'a' 'b c' \r\n");
  // CR/LF become spaces; NUL ends an argument, as printf's %s does.
  EXPECT_EQ(run(keys, {"x\r\ny", std::string_view("a\0b", 3)}),
            "-ERR unknown command 'x  y', with args beginning with: 'a' \r\n");
  // The name at most 128 bytes, the arguments 128 bytes in all.
  std::string const long_name(200, 'n');
  std::string const long_arg(100, 'a');
  std::string const expected =
      cat({"-ERR unknown command '", std::string(128, 'n'), "', with args beginning with: '",
           long_arg, "' '", std::string(25, 'a'), "' \r\n"});
  EXPECT_EQ(run(keys, {long_name, long_arg, long_arg, long_arg}), expected);
}

TEST(RespCommands, Incr) {
  resp::keyspace keys;
  EXPECT_EQ(run(keys, {"INCR", "n"}), ":1\r\n");
  EXPECT_EQ(run(keys, {"incr", "n"}), ":2\r\n");
  EXPECT_EQ(run(keys, {"GET", "n"}), bulk("2"));
  EXPECT_EQ(run(keys, {"DECR", "n"}), ":1\r\n");
  EXPECT_EQ(run(keys, {"DECRBY", "n", "5"}), ":-4\r\n");
  EXPECT_EQ(run(keys, {"INCRBY", "n", "-6"}), ":-10\r\n");
  EXPECT_EQ(run(keys, {"GET", "n"}), bulk("-10"));
  for (std::string_view bad : {"", "abc", " 1", "1 ", "+1", "01", "-0", "-", "1.5",
                               "99999999999999999999", "9223372036854775808"}) {
    EXPECT_EQ(run(keys, {"SET", "s", bad}), "+OK\r\n");
    EXPECT_EQ(run(keys, {"INCR", "s"}), "-ERR value is not an integer or out of range\r\n")
        << "value '" << bad << "'";
    EXPECT_EQ(run(keys, {"INCRBY", "n", bad}), "-ERR value is not an integer or out of range\r\n");
  }
  EXPECT_EQ(run(keys, {"GET", "n"}), bulk("-10"));
  EXPECT_EQ(run(keys, {"SET", "m", "9223372036854775806"}), "+OK\r\n");
  EXPECT_EQ(run(keys, {"INCR", "m"}), ":9223372036854775807\r\n");
  EXPECT_EQ(run(keys, {"INCR", "m"}), "-ERR increment or decrement would overflow\r\n");
  EXPECT_EQ(run(keys, {"GET", "m"}), bulk("9223372036854775807"));
  EXPECT_EQ(run(keys, {"SET", "m", "-9223372036854775808"}), "+OK\r\n");
  EXPECT_EQ(run(keys, {"DECR", "m"}), "-ERR increment or decrement would overflow\r\n");
  EXPECT_EQ(run(keys, {"INCR", "m"}), ":-9223372036854775807\r\n");
  EXPECT_EQ(run(keys, {"DECRBY", "m", "-9223372036854775808"}),
            "-ERR decrement would overflow\r\n");
}

TEST(RespCommands, ParseIntegerIsString2ll) {
  long long v = 0;
  EXPECT_TRUE(resp::parse_integer("0", v));
  EXPECT_EQ(v, 0);
  EXPECT_TRUE(resp::parse_integer("-9223372036854775808", v));
  EXPECT_EQ(v, LLONG_MIN);
  EXPECT_TRUE(resp::parse_integer("9223372036854775807", v));
  EXPECT_EQ(v, LLONG_MAX);
  EXPECT_TRUE(resp::parse_integer("-12", v));
  EXPECT_EQ(v, -12);
  EXPECT_FALSE(resp::parse_integer("-9223372036854775809", v));
  EXPECT_FALSE(resp::parse_integer("00", v));
  EXPECT_FALSE(resp::parse_integer(std::string_view("1\0", 2), v));
}

TEST(RespCommands, Quit) {
  resp::keyspace keys;
  std::vector<std::string_view> argv{"QUIT"};
  std::string out;
  EXPECT_EQ(resp::execute(keys, argv, out), after_reply::close);
  EXPECT_EQ(out, "+OK\r\n");
}

TEST(RespSession, ArraysAndInline) {
  resp::keyspace keys;
  EXPECT_EQ(feed_all(keys, array({"SET", "k", "v"})), "+OK\r\n");
  EXPECT_EQ(feed_all(keys, "GET k\r\n"), bulk("v"));
  EXPECT_EQ(feed_all(keys, "PING\n"), "+PONG\r\n");
  EXPECT_EQ(feed_all(keys, "  \r\n\r\nECHO \"a b\\x41\\n\"\r\n"), bulk("a bA\n"));
  EXPECT_EQ(feed_all(keys, "ECHO a b\r\n"),
            "-ERR wrong number of arguments for 'echo' command\r\n");
  EXPECT_EQ(feed_all(keys, "ECHO 'c\\'d'\r\n"), bulk("c'd"));
  // "*0" and "*-1" are skipped, as Redis skips them.
  EXPECT_EQ(feed_all(keys, "*0\r\n*-1\r\nPING\r\n"), "+PONG\r\n");
  // A '$' line is an inline command to Redis.
  EXPECT_EQ(feed_all(keys, "$3\r\n"), "-ERR unknown command '$3', with args beginning with: \r\n");
}

TEST(RespSession, PipelinedBatchIsAnsweredInOrder) {
  resp::keyspace keys;
  std::string input;
  std::string expected;
  for (int k = 0; k < 100; ++k) {
    std::string const key = cat({"key:", std::to_string(k)});
    input += array({"SET", key, std::to_string(k)});
    input += array({"INCR", key});
    input += cat({"GET ", key, "\r\n"});
    expected += cat({"+OK\r\n:", std::to_string(k + 1), "\r\n", bulk(std::to_string(k + 1))});
  }
  input += array({"DEL", "key:0", "key:99", "none"});
  expected += ":2\r\n";
  EXPECT_EQ(feed_all(keys, input), expected);
  EXPECT_EQ(keys.size(), 98u);
}

// Every split of a batch into two feeds gives the same replies as one feed,
// and a byte-at-a-time feed too.
TEST(RespSession, SplitAtEveryByte) {
  std::string const value(300, 'v');
  std::string const input =
      cat({array({"SET", "k", value}), "PING\r\n", array({"GET", "k"}), "ECHO \"x y\"\r\n",
           array({"INCR", "n"}), array({"EXISTS", "k", "n"})});
  std::string const expected = cat({"+OK\r\n+PONG\r\n", bulk(value), bulk("x y"), ":1\r\n:2\r\n"});
  for (std::size_t cut = 0; cut <= input.size(); ++cut) {
    resp::keyspace keys;
    resp::session s(keys);
    std::string out;
    ASSERT_EQ(s.feed(std::string_view(input).substr(0, cut), out), after_reply::keep_open);
    ASSERT_EQ(s.feed(std::string_view(input).substr(cut), out), after_reply::keep_open);
    ASSERT_EQ(out, expected) << "split at " << cut;
    EXPECT_EQ(s.buffered(), 0u);
  }
  resp::keyspace keys;
  resp::session s(keys);
  std::string out;
  for (char c : input)
    ASSERT_EQ(s.feed(std::string_view(&c, 1), out), after_reply::keep_open);
  EXPECT_EQ(out, expected);
}

TEST(RespSession, ProtocolErrorsClose) {
  struct bad_case {
    std::string input;
    std::string reply;
  };
  std::vector<bad_case> const cases{
      {"*x\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
      {"*99999999999\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
      {"*2\r\n$-5\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
      {"*1\r\n:5\r\n", "-ERR Protocol error: expected '$', got ':'\r\n"},
      {"*1\r\n*1\r\n$1\r\na\r\n", "-ERR Protocol error: expected '$', got '*'\r\n"},
      // Refused before hiredis would allocate 16 GB for it.
      {"*2\r\n$1\r\na\r\n*2000000000\r\n", "-ERR Protocol error: expected '$', got '*'\r\n"},
      {"*1\r\n!\r\n", "-ERR Protocol error: got \"!\" as reply type byte\r\n"},
      {"ECHO \"abc\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
      {"ECHO \"a\"b\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
  };
  for (bad_case const& c : cases) {
    resp::keyspace keys;
    resp::session s(keys);
    std::string out;
    // Requests before the bad one are answered first.
    EXPECT_EQ(s.feed(cat({"PING\r\n", c.input, "PING\r\n"}), out), after_reply::close) << c.input;
    EXPECT_EQ(out, cat({"+PONG\r\n", c.reply})) << c.input;
    out.clear();
    EXPECT_EQ(s.feed("PING\r\n", out), after_reply::close);
    EXPECT_EQ(out, "");
  }
}

TEST(RespSession, Limits) {
  resp::keyspace keys;
  resp::session_limits limits;
  limits.max_inline = 100;
  limits.max_query_buffer = 1000;
  limits.max_multibulk = 4;
  {
    resp::session s(keys, limits);
    std::string out;
    EXPECT_EQ(s.feed(std::string(100, 'a'), out), after_reply::keep_open);
    EXPECT_EQ(s.feed("a", out), after_reply::close);
    EXPECT_EQ(out, "-ERR Protocol error: too big inline request\r\n");
  }
  {
    resp::session s(keys, limits);
    std::string out;
    EXPECT_EQ(s.feed(cat({"*", std::string(101, '1')}), out), after_reply::close);
    EXPECT_EQ(out, "-ERR Protocol error: too big mbulk count string\r\n");
  }
  {
    resp::session s(keys, limits);
    std::string out;
    EXPECT_EQ(s.feed(array({"EXISTS", "a", "b", "c"}), out), after_reply::keep_open);
    EXPECT_EQ(out, ":0\r\n");
    out.clear();
    EXPECT_EQ(s.feed("*5\r\n", out), after_reply::close);
    EXPECT_EQ(out, "-ERR Protocol error: invalid multibulk length\r\n");
  }
  {
    resp::session s(keys, limits);
    std::string out;
    EXPECT_EQ(s.feed(cat({"*2\r\n$3\r\nSET\r\n$5000\r\n", std::string(900, 'x')}), out),
              after_reply::keep_open);
    EXPECT_EQ(s.feed(std::string(200, 'x'), out), after_reply::close);
    EXPECT_EQ(out, "");
  }
}

TEST(RespKeyspace, ShardsUnderThreads) {
  resp::keyspace keys;
  std::vector<std::thread> threads;
  constexpr int kThreads = 4;
  constexpr int kKeys = 2000;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&keys] {
      for (int k = 0; k < kKeys; ++k) {
        std::string const key = cat({"counter:", std::to_string(k % 50)});
        EXPECT_EQ(run(keys, {"INCR", key}).front(), ':');
        EXPECT_EQ(run(keys, {"SET", cat({"key:", std::to_string(k)}), "v"}), "+OK\r\n");
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(keys.size(), std::size_t{50 + kKeys});
  for (int k = 0; k < 50; ++k)
    EXPECT_EQ(run(keys, {"GET", cat({"counter:", std::to_string(k)})}),
              bulk(std::to_string(kThreads * kKeys / 50)));
  // The keys spread over the shards.
  std::vector<int> per_shard(resp::keyspace::shard_count);
  for (int k = 0; k < kKeys; ++k)
    ++per_shard[resp::keyspace::shard_of(cat({"key:", std::to_string(k)}))];
  for (int n : per_shard)
    EXPECT_GT(n, 0);
}

TEST(RespCli, Options) {
  resp::options opt;
  char const* defaults[] = {"spindle-resp"};
  EXPECT_EQ(resp::parse_command_line(1, defaults, opt), std::nullopt);
  EXPECT_EQ(opt.port, 6380);
  EXPECT_EQ(opt.bind, "127.0.0.1");
  char const* args[] = {"spindle-resp", "--port", "0",    "--workers", "3",
                        "--bind",       "::1",    "--io", "threadpool"};
  EXPECT_EQ(resp::parse_command_line(9, args, opt), std::nullopt);
  EXPECT_EQ(opt.port, 0);
  EXPECT_EQ(opt.workers, 3u);
  EXPECT_EQ(opt.bind, "::1");
  EXPECT_EQ(opt.io, resp::io_choice::threadpool);
  resp::options other;
  char const* bad_port[] = {"spindle-resp", "--port", "70000"};
  EXPECT_EQ(resp::parse_command_line(3, bad_port, other), 2);
  char const* bad_flag[] = {"spindle-resp", "--frobnicate"};
  EXPECT_EQ(resp::parse_command_line(2, bad_flag, other), 2);
  char const* not_number[] = {"spindle-resp", "--workers", "many"};
  EXPECT_EQ(resp::parse_command_line(3, not_number, other), 2);
}

}  // namespace
