// scan::walker: grep -r's traversal (what is visited, what is skipped and
// reported), deep trees within a descriptor budget, the default walk's names.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <spindle/spindle.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "walker.hpp"

namespace {

class collect : public scan::walk_sink {
 public:
  spindle::task<void> file(scan::dir_ref const& dir, std::string_view name, std::string_view path,
                           bool command_line) override {
    files.emplace(std::string(path) + (command_line ? " (cl)" : ""));
    // `name` ends `path` and opens relative to `dir`.
    EXPECT_EQ(path.substr(path.size() - name.size()), name);
    struct stat st {};
    EXPECT_EQ(::fstatat(dir.fd(), std::string(name).c_str(), &st, 0), 0) << path;
    EXPECT_TRUE(S_ISREG(st.st_mode)) << path;
    if (command_line) {
      EXPECT_EQ(dir.fd(), AT_FDCWD);
    }
    if (walker != nullptr) {
      EXPECT_LE(walker->live_directories(), walker->max_directories()) << path;
      max_live = std::max(max_live, walker->live_directories());
    }
    if (hold > 0) {  // like scans in flight: keep the directory open
      held.push_back(dir);
      if (held.size() > hold) held.erase(held.begin());
    }
    co_return;
  }
  void error(std::string_view path, int) override { errors.emplace(path); }
  void failure(std::string_view path, std::string_view) override { errors.emplace(path); }
  void warning(std::string_view path, std::string_view) override { warnings.emplace(path); }
  spindle::task<bool> wait_for_descriptors() override {
    ++waits;
    if (held.empty()) co_return false;
    held.erase(held.begin());  // the oldest "scan" finished
    co_return true;
  }
  std::set<std::string> files, errors, warnings;
  scan::walker const* walker = nullptr;
  std::size_t hold = 0;
  std::vector<scan::dir_ref> held;
  std::size_t max_live = 0;
  std::size_t waits = 0;
};

class WalkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/scan-walker-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    namespace fs = std::filesystem;
    fs::create_directories(root_ / "d/sub/deeper");
    std::ofstream(root_ / "d/a") << "x\n";
    std::ofstream(root_ / "d/sub/b") << "x\n";
    std::ofstream(root_ / "d/sub/deeper/c") << "x\n";
    std::ofstream(root_ / "d/.hidden") << "x\n";
    fs::create_symlink("sub", root_ / "d/link_dir");
    fs::create_symlink("a", root_ / "d/link_file");
    fs::create_symlink("loop", root_ / "d/loop");
    ASSERT_EQ(::mkfifo((root_ / "d/fifo").c_str(), 0644), 0);
    saved_cwd_ = fs::current_path();
  }
  void TearDown() override {
    std::filesystem::current_path(saved_cwd_);
    std::filesystem::remove_all(root_);
  }
  // The walk is a task: run it on the runtime and wait.
  void walk(scan::walker& w, std::string operand) {
    rt_.block_on(w.walk_operand(std::move(operand)));
  }
  spindle::runtime rt_{spindle::runtime_config{.workers = 2}};
  std::filesystem::path root_;
  std::filesystem::path saved_cwd_;
};

TEST_F(WalkerTest, WalksLikeGrepR) {
  std::filesystem::current_path(root_);
  collect c;
  scan::walker w(c);
  walk(w, "d/");
  EXPECT_EQ(c.files, (std::set<std::string>{"d/a", "d/sub/b", "d/sub/deeper/c", "d/.hidden"}));
  EXPECT_TRUE(c.errors.empty());
  collect c2;
  scan::walker w2(c2);
  walk(w2, "d//sub");
  walk(w2, "d/link_dir");  // command-line symlinks are followed
  walk(w2, "d/link_file");
  walk(w2, "d/fifo");  // never opened, never reported
  walk(w2, "nope");
  EXPECT_EQ(c2.files, (std::set<std::string>{"d//sub/b", "d//sub/deeper/c", "d/link_dir/b",
                                             "d/link_dir/deeper/c", "d/link_file (cl)"}));
  EXPECT_EQ(c2.errors, (std::set<std::string>{"nope"}));
}

TEST_F(WalkerTest, DeepTreeWithinADescriptorBudget) {
  // 40 levels of 200-byte names (over PATH_MAX), a file per level, and
  // files whose directories stay referenced ("in flight") for a while: the
  // walker stays within its directory budget, gives up its ancestors and
  // finds them again through "..", and still lists everything.
  namespace fs = std::filesystem;
  std::string const name(200, 'n');
  std::set<std::string> want;
  {
    int fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    std::string path = "deep";
    ASSERT_EQ(::mkdirat(fd, "deep", 0755), 0);
    int next = ::openat(fd, "deep", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ::close(fd);
    fd = next;
    for (int level = 0; level < 40; ++level) {
      for (char const* leaf : {"f1", "f2"}) {
        int const w = ::openat(fd, leaf, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ASSERT_GE(w, 0);
        ::close(w);
        want.insert(path + "/" + leaf);
      }
      ASSERT_EQ(::mkdirat(fd, name.c_str(), 0755), 0);
      ASSERT_EQ(::mkdirat(fd, "side", 0755), 0);  // a second subdirectory per level
      int const side = ::openat(fd, "side", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      int const w = ::openat(side, "s", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      ASSERT_GE(w, 0);
      ::close(w);
      ::close(side);
      want.insert(path + "/side/s");
      next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      ::close(fd);
      ASSERT_GE(next, 0);
      fd = next;
      path += "/" + name;
    }
    ::close(fd);
    ASSERT_GT(path.size(), std::size_t{PATH_MAX});
  }
  fs::current_path(root_);
  for (std::size_t budget : {std::size_t{4}, std::size_t{8}, std::size_t{16}, std::size_t{1000}}) {
    collect c;
    scan::walker w(c);
    w.set_descriptor_budget(budget);
    c.walker = &w;
    c.hold = 3;
    walk(w, "deep");
    EXPECT_EQ(c.files, want) << budget;
    EXPECT_TRUE(c.errors.empty()) << budget;
    EXPECT_LE(c.max_live, w.max_directories()) << budget;
    c.held.clear();
    EXPECT_EQ(w.live_directories(), 0u) << budget;  // nothing leaked
  }
  // Removal with *at() only: the tree is deeper than PATH_MAX.
  std::function<void(int, char const*)> remove_at = [&](int parent, char const* entry) {
    int const fd = ::openat(parent, entry, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      ::unlinkat(parent, entry, 0);
      return;
    }
    for (char const* leaf : {"f1", "f2", "s"})
      ::unlinkat(fd, leaf, 0);
    remove_at(fd, "side");
    remove_at(fd, name.c_str());
    ::close(fd);
    ::unlinkat(parent, entry, AT_REMOVEDIR);
  };
  remove_at(AT_FDCWD, "deep");
  EXPECT_FALSE(fs::exists(root_ / "deep"));
}

TEST_F(WalkerTest, DefaultWalkNamesWithoutDotSlash) {
  std::filesystem::current_path(root_ / "d");
  collect c;
  scan::walker w(c);
  rt_.block_on(w.walk_default());
  EXPECT_EQ(c.files, (std::set<std::string>{"a", "sub/b", "sub/deeper/c", ".hidden"}));
  EXPECT_TRUE(scan::walker::is_directory("sub"));
  EXPECT_TRUE(scan::walker::is_directory("link_dir"));
  EXPECT_FALSE(scan::walker::is_directory("a"));
}

}  // namespace
