// spindle-wc's pieces without the runtime: the counter (GNU wc's C-locale
// rules, chunk boundaries), the output format and widths, name quoting, the
// command line and the walk.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "count.hpp"
#include "format.hpp"
#include "walk.hpp"

namespace {

std::span<std::byte const> bytes_of(std::string_view s) {
  return {reinterpret_cast<std::byte const*>(s.data()), s.size()};
}

wc::counts count(std::string_view s) {
  return wc::count_buffer(bytes_of(s));
}

wc::counts counts_of(std::uint64_t lines, std::uint64_t words, std::uint64_t bytes) {
  return {lines, words, bytes};
}

// Feeds `s` split into pieces of `piece` bytes.
wc::counts count_in_pieces(std::string_view s, std::size_t piece) {
  wc::counter c;
  for (std::size_t at = 0; at < s.size(); at += piece)
    c.feed(bytes_of(s.substr(at, piece)));
  return c.result();
}

// A reference written from the rules' text, one byte at a time.
wc::counts reference(std::string_view s) {
  wc::counts c;
  bool in_word = false;
  for (char ch : s) {
    auto const b = static_cast<unsigned char>(ch);
    ++c.bytes;
    if (b == '\n') ++c.lines;
    bool const space = b == ' ' || b == '\t' || b == '\n' || b == '\v' || b == '\f' || b == '\r';
    bool const word_byte = b >= 0x21 && b <= 0x7e;
    if (space) {
      in_word = false;
    } else if (word_byte) {
      if (!in_word) ++c.words;
      in_word = true;
    }
  }
  return c;
}

TEST(Counter, EmptyInput) {
  EXPECT_EQ(count(""), counts_of(0, 0, 0));
  wc::counter c;
  c.feed({});
  EXPECT_EQ(c.result(), counts_of(0, 0, 0));
}

TEST(Counter, SimpleText) {
  EXPECT_EQ(count("hello world\n"), counts_of(1, 2, 12));
  EXPECT_EQ(count("  a  b\tc\n\nd\n"), counts_of(3, 4, 12));
}

TEST(Counter, NoTrailingNewline) {
  EXPECT_EQ(count("one two"), counts_of(0, 2, 7));
  EXPECT_EQ(count("a\nb"), counts_of(1, 2, 3));
}

TEST(Counter, CrLf) {
  EXPECT_EQ(count("a b\r\nc\r\n"), counts_of(2, 3, 8));
  EXPECT_EQ(count("x\ry"), counts_of(0, 2, 3));  // \r separates words, is no line
  EXPECT_EQ(count("\r\r\r"), counts_of(0, 0, 3));
}

TEST(Counter, AllWhitespaceSeparates) {
  EXPECT_EQ(count("a b\tc\nd\ve\ff\rg"), counts_of(1, 7, 13));
}

TEST(Counter, HighBytesNeitherStartNorEndWords) {
  EXPECT_EQ(count("\x80"), counts_of(0, 0, 1));
  EXPECT_EQ(count("a\x80"), counts_of(0, 1, 2));
  EXPECT_EQ(count("a\x80"
                  "b"),
            counts_of(0, 1, 3));
  EXPECT_EQ(count("\xff\xfe x \xc3\xa9t\xc3\xa9"), counts_of(0, 2, 10));
  // "\x80a\x01b c\xffd\te": GNU wc -w says 3.
  EXPECT_EQ(count("\x80"
                  "a\x01"
                  "b c\xff"
                  "d\te")
                .words,
            3u);
}

TEST(Counter, ControlBytesNeitherStartNorEndWords) {
  EXPECT_EQ(count(std::string_view("\0\0\0", 3)), counts_of(0, 0, 3));
  EXPECT_EQ(count(std::string_view("a\0b", 3)), counts_of(0, 1, 3));
  EXPECT_EQ(count("\x1b[1m bold\x7f"), counts_of(0, 2, 10));
  EXPECT_EQ(count("\x01"), counts_of(0, 0, 1));
}

TEST(Counter, WordsAcrossChunkBoundaries) {
  std::string const text =
      "alpha beta\n gamma\x80\x80"
      "delta  \r\n\x01x y";
  wc::counts const whole = count(text);
  EXPECT_EQ(whole, reference(text));
  for (std::size_t piece = 1; piece <= text.size(); ++piece)
    EXPECT_EQ(count_in_pieces(text, piece), whole) << "pieces of " << piece;
  // A word split exactly at the boundary is one word.
  wc::counter c;
  c.feed(bytes_of("hel"));
  c.feed(bytes_of("lo"));
  EXPECT_EQ(c.result(), counts_of(0, 1, 5));
}

TEST(Counter, RandomBytesAgainstReference) {
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    std::string s(rng() % 3000, '\0');
    int const mode = round % 3;
    for (char& ch : s) {
      unsigned const r = rng();
      if (mode == 0) {
        ch = static_cast<char>(r & 0xff);
      } else {
        // Mostly text, some whitespace and odd bytes.
        static constexpr std::string_view kAlphabet = "ab \n\t\r\v\f\x80\x01\xff.z";
        ch = kAlphabet[r % kAlphabet.size()];
      }
    }
    wc::counts const want = reference(s);
    EXPECT_EQ(count(s), want);
    EXPECT_EQ(count_in_pieces(s, 1 + rng() % 64), want);
  }
}

TEST(Counter, WithoutWords) {
  wc::counter c(false);
  c.feed(bytes_of("a b\nc\n"));
  EXPECT_EQ(c.result(), counts_of(2, 0, 6));
}

TEST(Counter, Classify) {
  EXPECT_EQ(wc::classify(' '), wc::byte_class::space);
  EXPECT_EQ(wc::classify('\v'), wc::byte_class::space);
  EXPECT_EQ(wc::classify('!'), wc::byte_class::print);
  EXPECT_EQ(wc::classify('~'), wc::byte_class::print);
  EXPECT_EQ(wc::classify(0x7f), wc::byte_class::other);
  EXPECT_EQ(wc::classify(0x80), wc::byte_class::other);
  EXPECT_EQ(wc::classify(0), wc::byte_class::other);
  int print = 0;
  int space = 0;
  for (unsigned c = 0; c < 256; ++c) {
    print += wc::classify(static_cast<unsigned char>(c)) == wc::byte_class::print;
    space += wc::classify(static_cast<unsigned char>(c)) == wc::byte_class::space;
  }
  EXPECT_EQ(print, 0x7e - 0x21 + 1);
  EXPECT_EQ(space, 6);
}

// ------------------------------------------------------------- format

std::string line(wc::counts c, wc::selection sel, int width, char const* name) {
  std::string out;
  std::string const n = name != nullptr ? name : "";
  wc::append_counts(out, c, sel, width, name != nullptr ? &n : nullptr);
  return out;
}

TEST(Format, Lines) {
  wc::selection const all;
  EXPECT_EQ(line(counts_of(1, 2, 4), all, 1, "d/x"), "1 2 4 d/x\n");
  EXPECT_EQ(line(counts_of(1, 2, 4), all, 2, "d/x"), " 1  2  4 d/x\n");
  EXPECT_EQ(line(counts_of(12, 345, 6789), all, 4, "f"), "  12  345 6789 f\n");
  EXPECT_EQ(line(counts_of(1, 2, 3), all, 7, nullptr), "      1       2       3\n");
  EXPECT_EQ(line(counts_of(1, 2, 3), wc::selection{true, false, false}, 3, "a"), "  1 a\n");
  EXPECT_EQ(line(counts_of(1, 2, 3), wc::selection{false, true, true}, 1, "a"), "2 3 a\n");
  // Wider than the width: printed in full.
  EXPECT_EQ(line(counts_of(123456, 0, 0), wc::selection{true, false, false}, 2, "a"), "123456 a\n");
  // Names with a newline are quoted, other names are not.
  EXPECT_EQ(line(counts_of(0, 1, 1), all, 1, "d/n\nl"), "0 1 1 'd/n'$'\\n''l'\n");
  EXPECT_EQ(line(counts_of(0, 1, 1), all, 1, "a b:c"), "0 1 1 a b:c\n");
}

TEST(Format, NumberWidth) {
  using wc::input_status;
  wc::selection const all;
  wc::selection const one{true, false, false};
  std::vector<input_status> in;
  EXPECT_EQ(wc::number_width(in, all), 1);
  in = {input_status{false, true, 1532}};
  EXPECT_EQ(wc::number_width(in, all), 4);
  EXPECT_EQ(wc::number_width(in, one), 1);  // one file, one count: no padding
  in = {input_status{false, true, 5}, input_status{false, true, 5}};
  EXPECT_EQ(wc::number_width(in, one), 2);
  in = {input_status{false, true, 0}, input_status{false, true, 0}};
  EXPECT_EQ(wc::number_width(in, all), 1);
  in = {input_status{false, false, 0}};  // a pipe: at least 7
  EXPECT_EQ(wc::number_width(in, all), 7);
  in = {input_status{false, true, 123}, input_status{true, true, 0}};
  EXPECT_EQ(wc::number_width(in, all), 3);
  in = {input_status{true, true, 0}, input_status{false, true, 123456}};
  EXPECT_EQ(wc::number_width(in, all), 6);  // `wc missing file`: from the others
  in = {input_status{false, true, 99'999'999'999ull}, input_status{false, true, 1}};
  EXPECT_EQ(wc::number_width(in, all), 12);
}

TEST(Format, QuoteName) {
  // Expected strings: GNU wc 9.1's messages for these names.
  EXPECT_EQ(wc::quote_name("plain.txt"), "plain.txt");
  EXPECT_EQ(wc::quote_name("a%b+c,d@e-f/g{h}i]"), "a%b+c,d@e-f/g{h}i]");
  EXPECT_EQ(wc::quote_name("a b"), "'a b'");
  EXPECT_EQ(wc::quote_name("a:b"), "'a:b'");
  EXPECT_EQ(wc::quote_name("a=b"), "'a=b'");
  EXPECT_EQ(wc::quote_name("#x"), "'#x'");
  EXPECT_EQ(wc::quote_name("x#"), "x#");
  EXPECT_EQ(wc::quote_name("~y"), "'~y'");
  EXPECT_EQ(wc::quote_name("y~"), "y~");
  EXPECT_EQ(wc::quote_name("it's"), "\"it's\"");
  EXPECT_EQ(wc::quote_name("a'b c"), "\"a'b c\"");
  EXPECT_EQ(wc::quote_name("a'b$c"), "'a'\\''b$c'");
  EXPECT_EQ(wc::quote_name("it's ok!"), "'it'\\''s ok!'");
  EXPECT_EQ(wc::quote_name("t\tab"), "'t'$'\\t''ab'");
  EXPECT_EQ(wc::quote_name("\x80hi"), "''$'\\200''hi'");
  EXPECT_EQ(wc::quote_name("\a\b\f\r\v/"), "''$'\\a\\b\\f\\r\\v''/'");
  EXPECT_EQ(wc::quote_name("\x1b"), "''$'\\033'");
  EXPECT_EQ(wc::quote_name("a\x80"), "'a'$'\\200'");
  EXPECT_EQ(wc::quote_name("\x80'"), "''$'\\200'\\'''");
  EXPECT_EQ(wc::quote_name("'\x80"), "''\\'''$'\\200'");
  EXPECT_EQ(wc::quote_name("a'\x80"
                           "b"),
            "'a'\\'''$'\\200''b'");
  EXPECT_EQ(wc::quote_name("nl\n"), "'nl'$'\\n'");
  EXPECT_EQ(wc::quote_name("\xc3\xa9/"), "''$'\\303\\251''/'");
  EXPECT_EQ(wc::error_line("a b", "Permission denied"), "spindle-wc: 'a b': Permission denied\n");
}

// ------------------------------------------------------------- command line

std::optional<int> parse(std::vector<std::string> args, wc::options& out) {
  args.insert(args.begin(), "spindle-wc");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  return wc::parse_command_line(static_cast<int>(argv.size()), argv.data(), out);
}

TEST(CommandLine, Flags) {
  wc::options o;
  EXPECT_EQ(parse({"a", "b"}, o), std::nullopt);
  EXPECT_TRUE(o.what.lines && o.what.words && o.what.bytes);
  EXPECT_EQ(o.paths, (std::vector<std::string>{"a", "b"}));
  wc::options l;
  EXPECT_EQ(parse({"-l", "x"}, l), std::nullopt);
  EXPECT_TRUE(l.what.lines && !l.what.words && !l.what.bytes);
  wc::options lw;
  EXPECT_EQ(parse({"-lw", "--io", "threadpool", "-j", "3", "x"}, lw), std::nullopt);
  EXPECT_TRUE(lw.what.lines && lw.what.words && !lw.what.bytes);
  EXPECT_EQ(lw.io, wc::io_choice::threadpool);
  EXPECT_EQ(lw.workers, 3u);
  wc::options odd;
  EXPECT_EQ(parse({"-c", "[a,b]", "-", "--", "-l"}, odd), std::nullopt);
  EXPECT_EQ(odd.paths, (std::vector<std::string>{"[a,b]", "-", "-l"}));
  EXPECT_TRUE(!odd.what.lines && odd.what.bytes);
  wc::options none;
  EXPECT_EQ(parse({}, none), std::nullopt);
  EXPECT_TRUE(none.paths.empty());
}

TEST(CommandLine, Errors) {
  testing::internal::CaptureStderr();
  wc::options o;
  EXPECT_EQ(parse({"--no-such-flag", "x"}, o), 1);
  EXPECT_EQ(parse({"--io", "carrier-pigeon", "x"}, o), 1);
  EXPECT_EQ(parse({"-j", "-2", "x"}, o), 1);
  std::string const err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("spindle-wc: "), std::string::npos);
  EXPECT_NE(err.find("Try 'spindle-wc --help'"), std::string::npos);
}

// ------------------------------------------------------------- walk

class recorder final : public wc::walk_visitor {
 public:
  void file(wc::dir_ptr const& dir, std::string_view name, std::string_view path,
            bool operand) override {
    files.emplace_back(path);
    // The name opens relative to the directory.
    int const fd = ::openat(wc::fd_of(dir), std::string(name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ++opened;
      ::close(fd);
    }
    operands += operand ? 1 : 0;
  }
  void error(std::string_view path, int error) override {
    errors.push_back(std::string(path) + ":" + std::to_string(error));
  }
  void warning(std::string_view path, std::string_view message) override {
    errors.push_back(std::string(path) + ":" + std::string(message));
  }
  std::vector<std::string> files;
  std::vector<std::string> errors;
  int opened = 0;
  int operands = 0;
};

class Walk : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/test_wc.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    std::filesystem::create_directories(root_ / "d" / "sub" / "deeper");
    std::filesystem::create_directories(root_ / "d" / "empty");
    touch(root_ / "d" / "a.txt");
    touch(root_ / "d" / "b c");
    touch(root_ / "d" / "sub" / "x");
    touch(root_ / "d" / "sub" / "deeper" / "y");
    std::filesystem::create_symlink("a.txt", root_ / "d" / "link");
    std::filesystem::create_directory_symlink("sub", root_ / "d" / "dirlink");
    ASSERT_EQ(::mkfifo((root_ / "d" / "fifo").c_str(), 0644), 0);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  static void touch(std::filesystem::path const& p) { std::ofstream(p) << "x\n"; }

  std::filesystem::path root_;
};

TEST_F(Walk, FindsRegularFilesLikeFind) {
  recorder r;
  std::string const d = (root_ / "d").string();
  wc::walk(d, r);
  std::sort(r.files.begin(), r.files.end());
  EXPECT_EQ(r.files, (std::vector<std::string>{d + "/a.txt", d + "/b c", d + "/sub/deeper/y",
                                               d + "/sub/x"}));
  EXPECT_EQ(r.opened, 4);
  EXPECT_EQ(r.operands, 0);
  EXPECT_TRUE(r.errors.empty());
}

TEST_F(Walk, OperandSpellings) {
  recorder slash;
  std::string const d = (root_ / "d" / "sub").string();
  wc::walk(d + "/", slash);
  std::sort(slash.files.begin(), slash.files.end());
  EXPECT_EQ(slash.files, (std::vector<std::string>{d + "/deeper/y", d + "/x"}));
  recorder two;
  wc::walk(d + "//", two);
  std::sort(two.files.begin(), two.files.end());
  EXPECT_EQ(two.files, (std::vector<std::string>{d + "//deeper/y", d + "//x"}));
  recorder link;  // a symlink operand is followed
  wc::walk((root_ / "d" / "dirlink").string(), link);
  EXPECT_EQ(link.files.size(), 2u);
}

TEST_F(Walk, NonDirectoryOperandsAreInputs) {
  recorder r;
  wc::walk((root_ / "d" / "a.txt").string(), r);
  wc::walk((root_ / "missing").string(), r);
  wc::walk("", r);
  EXPECT_EQ(r.files.size(), 3u);
  EXPECT_EQ(r.operands, 3);
  EXPECT_TRUE(r.errors.empty());  // reported when opened, as wc does
}

TEST_F(Walk, UnreadableDirectoryIsReported) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads every directory";
  std::filesystem::permissions(root_ / "d" / "sub", std::filesystem::perms::none);
  recorder r;
  wc::walk((root_ / "d").string(), r);
  std::filesystem::permissions(root_ / "d" / "sub", std::filesystem::perms::owner_all);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0], (root_ / "d" / "sub").string() + ":" + std::to_string(EACCES));
  EXPECT_EQ(r.files.size(), 2u);
}

TEST_F(Walk, DeepTree) {
  std::filesystem::path p = root_ / "deep";
  for (int k = 0; k < 300; ++k)
    p /= "level";
  std::filesystem::create_directories(p);
  touch(p / "bottom");
  recorder r;
  wc::walk((root_ / "deep").string(), r);
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_GT(r.files[0].size(), 300u * 6);
  EXPECT_EQ(r.opened, 1);
}

}  // namespace
