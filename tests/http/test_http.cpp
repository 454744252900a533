// spindle-http's request -> response layer without sockets: the request
// reader (Beast's parser), routing and target sanitizing, and the whole
// connection loop (http_server::serve_connection) over an in-memory stream
// in a spindle runtime: keep-alive rules per version, pipelined input split
// at every byte, malformed input, HEAD, 405, bodies, files below a root.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <spindle/spindle.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "connection.hpp"
#include "request_reader.hpp"
#include "response.hpp"

namespace {

namespace fs = std::filesystem;
using http_server::request_reader;
using http_server::site;

/// A byte stream in memory: reads hand out `chunks` one after the other
/// (one read never crosses a chunk), then end of stream; writes append to
/// `written`.
struct memory_stream {
  std::vector<std::string> chunks;
  std::size_t next = 0;    // the chunk being read
  std::size_t offset = 0;  // within it
  std::string written;
  std::size_t writes = 0;
  bool shut_down = false;  // shutdown_write() was called (the server closed)

  spindle::task<std::size_t> read_some(std::span<std::byte> buffer) {
    while (next < chunks.size() && offset == chunks[next].size()) {
      ++next;
      offset = 0;
    }
    if (next == chunks.size() || buffer.empty()) co_return 0;
    std::size_t const n = std::min(buffer.size(), chunks[next].size() - offset);
    std::memcpy(buffer.data(), chunks[next].data() + offset, n);
    offset += n;
    co_return n;
  }
  spindle::task<std::size_t> write_all(std::span<std::byte const> data) {
    written.append(reinterpret_cast<char const*>(data.data()), data.size());
    ++writes;
    co_return data.size();
  }
  void shutdown_write() { shut_down = true; }
};

static_assert(http_server::byte_stream<memory_stream>);
static_assert(http_server::byte_stream<spindle::net::tcp_stream>);

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override { plain.date_header = false; }

  /// Serves `chunks` as one connection's input; returns the stream.
  memory_stream serve(std::vector<std::string> chunks, site const& s) {
    memory_stream stream;
    stream.chunks = std::move(chunks);
    rt.block_on(http_server::serve_connection(stream, s));
    return stream;
  }
  memory_stream serve(std::string input) { return serve(std::vector{std::move(input)}, plain); }

  spindle::runtime rt{spindle::runtime_config{.workers = 2}};
  site plain;
};

/// The answer to GET / without a root, Date off.
std::string hello_response(std::string_view connection = "") {
  std::string r =
      "HTTP/1.1 200 OK\r\nServer: spindle-http\r\nContent-Type: text/plain; "
      "charset=utf-8\r\nContent-Length: 14\r\n";
  r += connection;
  r += "\r\nHello, World!\n";
  return r;
}

std::string error_response(int status, std::string_view body, std::string_view extra = "",
                           bool with_body = true) {
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " +
                  std::string(http_server::reason_of(status)) +
                  "\r\nServer: spindle-http\r\nContent-Type: text/plain; "
                  "charset=utf-8\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\n";
  r += extra;
  r += "\r\n";
  if (with_body) r += body;
  return r;
}

// --- request reader -------------------------------------------------------------

TEST(RequestReader, ParsesAHeadAndKeepAliveRules) {
  struct cases {
    std::string_view input;
    int version;
    bool keep_alive;
  };
  for (cases const& c : {
           cases{"GET /a HTTP/1.1\r\nHost: h\r\n\r\n", 11, true},
           cases{"GET /a HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 11, false},
           cases{"GET /a HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive, CLOSE\r\n\r\n", 11, false},
           cases{"GET /a HTTP/1.0\r\n\r\n", 10, false},
           cases{"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 10, true},
           cases{"GET /a HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 10, true},
       }) {
    request_reader r;
    EXPECT_EQ(r.parse(c.input), c.input.size()) << c.input;
    ASSERT_EQ(r.status(), request_reader::state::complete) << c.input;
    EXPECT_EQ(r.head().target, "/a");
    EXPECT_EQ(r.head().version, c.version) << c.input;
    EXPECT_EQ(r.head().keep_alive, c.keep_alive) << c.input;
  }
}

TEST(RequestReader, StopsAtTheEndOfOneRequestAndDiscardsBodies) {
  std::string const two =
      "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET /y HTTP/1.1\r\nHost: "
      "h\r\n\r\n";
  request_reader r;
  std::size_t const first = r.parse(two);
  ASSERT_EQ(r.status(), request_reader::state::complete);
  EXPECT_EQ(r.head().method, boost::beast::http::verb::post);
  EXPECT_EQ(two.substr(first, 6), "GET /y");
  r.reset();
  EXPECT_FALSE(r.started());
  EXPECT_EQ(r.parse(std::string_view(two).substr(first)), two.size() - first);
  ASSERT_EQ(r.status(), request_reader::state::complete);
  EXPECT_EQ(r.head().target, "/y");
  EXPECT_TRUE(r.head().has_host);
}

TEST(RequestReader, APartialHeadIsPassedAgainWithMoreBytes) {
  // Beast consumes the request line as soon as it is complete, the fields
  // only as a whole: what was not consumed comes again, with more behind it.
  std::string const request = "GET /p HTTP/1.1\r\nHost: h\r\n\r\n";
  request_reader r;
  std::size_t const line = r.parse(std::string_view(request).substr(0, 19));
  EXPECT_EQ(line, 17u) << "the request line";
  EXPECT_EQ(r.status(), request_reader::state::need_more);
  EXPECT_TRUE(r.started());
  EXPECT_EQ(r.parse(std::string_view(request).substr(line, 5)), 0u) << "fields: all or nothing";
  EXPECT_EQ(r.parse(std::string_view(request).substr(line)), request.size() - line);
  EXPECT_EQ(r.status(), request_reader::state::complete);
  EXPECT_EQ(r.head().target, "/p");
}

TEST(RequestReader, FailuresAndTheirStatus) {
  struct cases {
    std::string input;
    int status;
  };
  for (cases const& c : {
           cases{"GARBAGE\r\n\r\n", 400},
           cases{"GET / HTTP/9.9\r\nHost: h\r\n\r\n", 400},
           cases{"GET / HTTP/1.1\r\nHost h\r\n\r\n", 400},
           cases{"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n", 400},
           cases{"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
           cases{"GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(9000, 'a') + "\r\n\r\n", 431},
           cases{"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2000000\r\n\r\n", 413},
       }) {
    request_reader r;
    (void)r.parse(c.input);
    ASSERT_EQ(r.status(), request_reader::state::failed) << c.input.substr(0, 60);
    EXPECT_EQ(r.failure_status(), c.status) << c.input.substr(0, 60);
  }
}

// --- target sanitizing and routing --------------------------------------------------

TEST(Sanitize, PathsBelowTheRoot) {
  struct cases {
    std::string_view target;
    int status;
    std::string_view relative;
  };
  for (cases const& c : {
           cases{"/", 0, ""},
           cases{"/a/b.txt", 0, "a/b.txt"},
           cases{"//a///b/", 0, "a/b"},
           cases{"/a/./b", 0, "a/b"},
           cases{"/a/../b", 0, "b"},
           cases{"/a/b/../../c", 0, "c"},
           cases{"/a?x=../../..", 0, "a"},
           cases{"/a#frag", 0, "a"},
           cases{"/a%20b", 0, "a b"},
           cases{"/a%2Fb", 0, "a/b"},
           cases{"/..", 403, ""},
           cases{"/../etc/passwd", 403, ""},
           cases{"/a/../../etc", 403, ""},
           cases{"/%2e%2e/etc", 403, ""},
           cases{"/a/%2E%2E/%2e%2E/x", 403, ""},
           cases{"/a%2f..%2f..%2fx", 403, ""},
           cases{"a", 400, ""},
           cases{"*", 400, ""},
           cases{"http://h/a", 400, ""},
           cases{"/a%00b", 400, ""},
           cases{"/a%zzb", 400, ""},
           cases{"/a%4", 400, ""},
           cases{"/a%", 400, ""},
       }) {
    std::string relative = "junk";
    EXPECT_EQ(http_server::sanitize_target(c.target, relative), c.status) << c.target;
    if (c.status == 0) {
      EXPECT_EQ(relative, c.relative) << c.target;
    }
  }
}

TEST(Route, MethodsVersionsAndHost) {
  site s;
  http_server::request_head req;
  req.target = "/";
  req.has_host = true;
  req.method = boost::beast::http::verb::get;
  EXPECT_EQ(http_server::route(req, s).status, 200);
  EXPECT_EQ(http_server::route(req, s).body, "Hello, World!\n");
  req.method = boost::beast::http::verb::head;
  EXPECT_FALSE(http_server::route(req, s).send_body);
  for (auto m : {boost::beast::http::verb::post, boost::beast::http::verb::put,
                 boost::beast::http::verb::delete_, boost::beast::http::verb::options}) {
    req.method = m;
    http_server::response_plan const p = http_server::route(req, s);
    EXPECT_EQ(p.status, 405);
    EXPECT_TRUE(p.allow);
    EXPECT_TRUE(p.keep_alive);
  }
  req.method = boost::beast::http::verb::get;
  req.target = "/other";
  EXPECT_EQ(http_server::route(req, s).status, 404);
  req.target = "/";
  req.has_host = false;
  EXPECT_EQ(http_server::route(req, s).status, 400) << "HTTP/1.1 needs Host";
  EXPECT_FALSE(http_server::route(req, s).keep_alive);
  req.version = 10;
  EXPECT_EQ(http_server::route(req, s).status, 200) << "HTTP/1.0 does not";
}

TEST(Route, ContentTypes) {
  EXPECT_EQ(http_server::content_type_of("/r/index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(http_server::content_type_of("/r/a.png"), "image/png");
  EXPECT_EQ(http_server::content_type_of("/r/a.tar.gz"), "application/octet-stream");
  EXPECT_EQ(http_server::content_type_of("/r.d/noext"), "application/octet-stream");
}

// --- the connection loop --------------------------------------------------------------

TEST_F(HttpTest, GetHeadAndKeepAlive11) {
  memory_stream const s = serve("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(s.written, hello_response());
  EXPECT_FALSE(s.shut_down) << "HTTP/1.1 keeps the connection; the client's end of stream ends it";

  memory_stream const h = serve("HEAD / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(h.written, hello_response().substr(0, hello_response().size() - 14));
}

TEST_F(HttpTest, ConnectionCloseIsHonoured) {
  memory_stream const s = serve(
      "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(s.written, hello_response("Connection: close\r\n")) << "nothing after the close";
  EXPECT_TRUE(s.shut_down);
}

TEST_F(HttpTest, Http10ClosesUnlessAskedToKeepAlive) {
  memory_stream const a = serve("GET / HTTP/1.0\r\n\r\nGET / HTTP/1.0\r\n\r\n");
  EXPECT_EQ(a.written, hello_response("Connection: close\r\n"));
  EXPECT_TRUE(a.shut_down);

  memory_stream const b = serve(
      "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\nConnection: "
      "keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n");
  EXPECT_EQ(b.written, hello_response("Connection: keep-alive\r\n") +
                           hello_response("Connection: keep-alive\r\n") +
                           hello_response("Connection: close\r\n"));
  EXPECT_TRUE(b.shut_down);
}

TEST_F(HttpTest, PipelinedInputSplitAtEveryByte) {
  std::string const input =
      "GET / HTTP/1.1\r\nHost: h\r\n\r\n"
      "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n"
      "POST /form HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello=world"
      "GET /missing HTTP/1.1\r\nHost: h\r\n\r\n"
      "DELETE / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
      "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
  std::string const expected =
      hello_response() + hello_response().substr(0, hello_response().size() - 14) +
      error_response(405, "405 Method Not Allowed\n", "Allow: GET, HEAD\r\n") +
      error_response(404, "404 Not Found\n") +
      error_response(405, "405 Method Not Allowed\n", "Allow: GET, HEAD\r\n") +
      hello_response("Connection: close\r\n");

  memory_stream const whole = serve(input);
  EXPECT_EQ(whole.written, expected);
  EXPECT_EQ(whole.writes, 1u) << "one write for the whole pipelined batch";
  EXPECT_TRUE(whole.shut_down);

  for (std::size_t cut = 1; cut < input.size(); ++cut) {
    memory_stream const two = serve({input.substr(0, cut), input.substr(cut)}, plain);
    ASSERT_EQ(two.written, expected) << "split at " << cut;
  }
  std::vector<std::string> bytes;
  for (char c : input)
    bytes.emplace_back(1, c);
  memory_stream const each = serve(bytes, plain);
  EXPECT_EQ(each.written, expected) << "one byte per read";
}

TEST_F(HttpTest, MalformedInputAnswers400AndCloses) {
  for (std::string const bad : {
           "GARBAGE\r\n\r\n",
           "GET / HTTP/1.1\r\nHost h\r\n\r\n",
           "GET / HTTP/2.0\r\nHost: h\r\n\r\n",
           "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
           "GET / HTTP/1.1\r\n\r\n",  // no Host
           "GET /%zz HTTP/1.1\r\nHost: h\r\n\r\n",
           "\x01\x02\x03\r\n\r\n",
       }) {
    memory_stream const s = serve(bad + "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    EXPECT_EQ(s.written, error_response(400, "400 Bad Request\n", "Connection: close\r\n")) << bad;
    EXPECT_TRUE(s.shut_down) << bad;
  }
}

TEST_F(HttpTest, OversizedHeadAndBody) {
  memory_stream const a =
      serve("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(20000, 'a') + "\r\n\r\n");
  EXPECT_EQ(a.written,
            error_response(431, "431 Request Header Fields Too Large\n", "Connection: close\r\n"));
  memory_stream const b = serve("PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 5000000\r\n\r\nabc");
  EXPECT_EQ(b.written, error_response(413, "413 Content Too Large\n", "Connection: close\r\n"));
  EXPECT_TRUE(b.shut_down);
}

TEST_F(HttpTest, EndOfStreamInsideARequestAnswersNothing) {
  memory_stream const s = serve("GET / HTTP/1.1\r\nHost: h\r\n\r\nGET / HTT");
  EXPECT_EQ(s.written, hello_response());
  EXPECT_FALSE(s.shut_down);
}

// --- files below a root ---------------------------------------------------------------

class HttpFilesTest : public HttpTest {
 protected:
  void SetUp() override {
    HttpTest::SetUp();
    base = fs::temp_directory_path() / ("spindle_http_test_" + std::to_string(::getpid()));
    fs::remove_all(base);
    fs::create_directories(base / "root/dir");
    fs::create_directories(base / "root/with_index");
    fs::create_directories(base / "outside");
    write(base / "root/a.txt", "alpha\n");
    write(base / "root/with_index/index.html", "<p>index</p>\n");
    write(base / "outside/secret.txt", "secret\n");
    large.resize(3 * http_server::kFileChunkBytes + 12345);
    for (std::size_t i = 0; i < large.size(); ++i)
      large[i] = static_cast<char>((i * 7919u) >> 3);
    write(base / "root/large.bin", large);
    fs::create_symlink(base / "outside/secret.txt", base / "root/escape.txt");
    fs::create_symlink(base / "outside", base / "root/escape_dir");
    fs::create_symlink("a.txt", base / "root/inside_link.txt");
    files.root = fs::canonical(base / "root").string();
    files.date_header = false;
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(base / "root/locked.txt", fs::perms::owner_all, ec);
    fs::remove_all(base, ec);
  }
  static void write(fs::path const& p, std::string const& data) {
    std::ofstream(p, std::ios::binary) << data;
  }
  std::string get(std::string const& target, std::string_view method = "GET") {
    return serve({std::string(method) + " " + target + " HTTP/1.1\r\nHost: h\r\n\r\n"}, files)
        .written;
  }
  static std::string ok_head(std::string_view type, std::size_t length) {
    return "HTTP/1.1 200 OK\r\nServer: spindle-http\r\nContent-Type: " + std::string(type) +
           "\r\nContent-Length: " + std::to_string(length) + "\r\n\r\n";
  }

  fs::path base;
  std::string large;
  site files;
};

TEST_F(HttpFilesTest, ServesFilesByteForByte) {
  EXPECT_EQ(get("/a.txt"), ok_head("text/plain; charset=utf-8", 6) + "alpha\n");
  EXPECT_EQ(get("/a.txt", "HEAD"), ok_head("text/plain; charset=utf-8", 6));
  EXPECT_EQ(get("/inside_link.txt"), ok_head("text/plain; charset=utf-8", 6) + "alpha\n");
  EXPECT_EQ(get("/dir/../a.txt?q=1"), ok_head("text/plain; charset=utf-8", 6) + "alpha\n");
  EXPECT_EQ(get("/large.bin"), ok_head("application/octet-stream", large.size()) + large);
  EXPECT_EQ(get("/large.bin", "HEAD"), ok_head("application/octet-stream", large.size()));
}

TEST_F(HttpFilesTest, DirectoriesServeTheirIndexOr404) {
  std::string const index = ok_head("text/html; charset=utf-8", 13) + "<p>index</p>\n";
  EXPECT_EQ(get("/with_index/"), index);
  EXPECT_EQ(get("/with_index"), index);
  EXPECT_EQ(get("/dir/"), error_response(404, "404 Not Found\n"));
  EXPECT_EQ(get("/"), error_response(404, "404 Not Found\n"));
  write(base / "root/index.html", "<p>root</p>\n");
  EXPECT_EQ(get("/"), ok_head("text/html; charset=utf-8", 12) + "<p>root</p>\n");
}

TEST_F(HttpFilesTest, EscapesAreRefused) {
  std::string const forbidden = error_response(403, "403 Forbidden\n");
  EXPECT_EQ(get("/escape.txt"), forbidden) << "a symlink out of the root";
  EXPECT_EQ(get("/escape_dir/secret.txt"), forbidden) << "a directory symlink out of the root";
  EXPECT_EQ(get("/../outside/secret.txt"), forbidden);
  EXPECT_EQ(get("/%2e%2e/outside/secret.txt"), forbidden);
  EXPECT_EQ(get("/missing.txt"), error_response(404, "404 Not Found\n"));
  EXPECT_EQ(get("/a.txt/x"), error_response(404, "404 Not Found\n"));
}

TEST_F(HttpFilesTest, SpecialFilesAre404) {
  ASSERT_EQ(::mkfifo((base / "root/fifo").c_str(), 0644), 0);
  EXPECT_EQ(get("/fifo"), error_response(404, "404 Not Found\n")) << "and the open never blocks";
}

TEST_F(HttpFilesTest, PermissionDeniedIs403) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "root reads unreadable files (http_vs_curl checks as nobody)";
  write(base / "root/locked.txt", "locked\n");
  fs::permissions(base / "root/locked.txt", fs::perms::none);
  EXPECT_EQ(get("/locked.txt"), error_response(403, "403 Forbidden\n"));
}

TEST_F(HttpFilesTest, PipelinedFilesKeepTheirOrder) {
  std::string const input =
      "GET /a.txt HTTP/1.1\r\nHost: h\r\n\r\nGET /large.bin HTTP/1.1\r\nHost: h\r\n\r\n"
      "GET /missing HTTP/1.1\r\nHost: h\r\n\r\nHEAD /a.txt HTTP/1.1\r\nHost: h\r\n\r\n";
  std::string const expected = ok_head("text/plain; charset=utf-8", 6) + "alpha\n" +
                               ok_head("application/octet-stream", large.size()) + large +
                               error_response(404, "404 Not Found\n") +
                               ok_head("text/plain; charset=utf-8", 6);
  for (std::size_t cut : {std::size_t{1}, std::size_t{40}, input.size() / 2, input.size() - 1})
    EXPECT_EQ(serve({input.substr(0, cut), input.substr(cut)}, files).written, expected) << cut;
}

// --- command line -----------------------------------------------------------------------

TEST(CommandLine, DefaultsAndErrors) {
  auto parse = [](std::vector<std::string> args, http_server::options& o) {
    std::vector<char*> argv;
    args.insert(args.begin(), "spindle-http");
    for (auto& a : args)
      argv.push_back(a.data());
    return http_server::parse_command_line(static_cast<int>(argv.size()), argv.data(), o);
  };
  http_server::options o;
  EXPECT_EQ(parse({}, o), std::nullopt);
  EXPECT_EQ(o.port, 8080);
  EXPECT_EQ(o.bind, "127.0.0.1");
  http_server::options p;
  EXPECT_EQ(parse({"--port", "0", "--workers", "2", "--bind", "::1", "--root", "/"}, p),
            std::nullopt);
  EXPECT_EQ(p.port, 0);
  EXPECT_EQ(p.workers, 2u);
  EXPECT_EQ(p.root, "/");
  testing::internal::CaptureStderr();
  http_server::options q;
  EXPECT_EQ(parse({"--port", "70000"}, q), 2);
  EXPECT_EQ(parse({"--bogus"}, q), 2);
  EXPECT_EQ(parse({"--root", "/nonexistent/dir"}, q), 2);
  EXPECT_EQ(parse({"--bind", "localhost"}, q), 2);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("--bind"), std::string::npos);
}

}  // namespace
