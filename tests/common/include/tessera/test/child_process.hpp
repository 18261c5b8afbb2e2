// tessera's executables as child processes for the tests: find them (TESSERA_BIN_DIR), start them
// with stdout on a pipe (or the test's own), read the "listening on http(s)://ADDR:PORT ..." line,
// stop them (SIGTERM, then SIGKILL), find the processes they started (children_named).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tessera::test_support {

inline std::string bin(const char* name) {
  const char* dir = std::getenv("TESSERA_BIN_DIR");
  return std::string(dir ? dir : "bin") + "/" + name;
}

struct child {
  pid_t pid = -1;
  int out_fd = -1;  ///< the child's stdout (-1 when not captured); its stderr is the test's
};

/// Where a child's stdout goes: a pipe the test reads (child::out_fd), or the test's own stdout
/// (for a process whose output nobody reads: a full pipe would block it).
enum class child_stdout { pipe, inherit };

/// `stderr_path` non-empty: the child's stderr goes to that file (created, truncated).
inline child spawn(const std::vector<std::string>& args, const std::string& stderr_path = "",
                   child_stdout out = child_stdout::pipe) {
  const bool capture = out == child_stdout::pipe;
  int fds[2] = {-1, -1};
  if (capture && pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    if (capture) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
    }
    if (!stderr_path.empty()) {
      int e = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (e >= 0) dup2(e, 2);
    }
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (!capture) return {pid, -1};
  close(fds[1]);
  return {pid, fds[0]};
}

/// SIGTERM, then SIGKILL when it has not exited after `grace`; reaped, its pipe closed, `c` reset.
inline void stop(child& c, std::chrono::milliseconds grace = std::chrono::seconds(10)) {
  if (c.pid > 0) {
    kill(c.pid, SIGTERM);
    const auto until = std::chrono::steady_clock::now() + grace;
    int ws = 0;
    while (waitpid(c.pid, &ws, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &ws, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (c.out_fd >= 0) close(c.out_fd);
  c = {};
}

/// Stops a child when a failed assertion leaves the test early.
struct child_guard {
  child& c;
  ~child_guard() { stop(c); }
};

/// One line of the child's stdout ("" when it ended without one).
inline std::string read_line(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

/// The PORT of "listening on http(s)://ADDR:PORT model ...", 0 when the line is not one.
inline uint16_t listening_port(const std::string& line) {
  auto end = line.find(" model");
  if (line.rfind("listening on ", 0) != 0 || end == std::string::npos) return 0;
  auto colon = line.rfind(':', end);
  if (colon == std::string::npos) return 0;
  return static_cast<uint16_t>(std::atoi(line.c_str() + colon + 1));
}

/// Reads the child's stdout up to its listening line; its port, or 0 when the output ended first.
inline uint16_t await_port(int fd) {
  for (;;) {
    std::string line;
    char c;
    ssize_t n;
    while ((n = read(fd, &c, 1)) == 1 && c != '\n') line += c;
    if (uint16_t port = listening_port(line); port != 0) return port;
    if (n != 1) return 0;
  }
}

/// A server started and read up to its listening line (tessera-host prints its plan first);
/// SIGTERMed and waited for when it ends.
class served_process {
 public:
  explicit served_process(const std::vector<std::string>& args) : c_(spawn(args)) {
    if (c_.pid <= 0) return;
    for (int i = 0; i < 1000 && port_ == 0; ++i) {
      std::string line = read_line(c_.out_fd);
      port_ = listening_port(line);
      if (port_ != 0 || !line.empty()) line_ = line;
      if (port_ == 0 && line.empty() && !alive()) return;
    }
  }
  ~served_process() { stop(); }
  served_process(const served_process&) = delete;
  served_process& operator=(const served_process&) = delete;

  uint16_t port() const { return port_; }  ///< 0: it did not start
  /// The listening line (or the last line printed, when it did not start).
  const std::string& line() const { return line_; }
  /// True while the process has not exited.
  bool alive() {
    if (c_.pid <= 0) return false;
    int ws = 0;
    if (waitpid(c_.pid, &ws, WNOHANG) == 0) return true;
    reaped(ws);
    return false;
  }
  pid_t pid() const { return c_.pid; }
  /// SIGTERM (`times` in a row, as GNU timeout or a process-group kill deliver it), then the exit
  /// code (-1 when killed by a signal or never started).
  int stop(int times = 1) {
    if (c_.pid <= 0) return exit_code_;
    for (int i = 0; i < times; ++i) kill(c_.pid, SIGTERM);
    int ws = 0;
    waitpid(c_.pid, &ws, 0);
    reaped(ws);
    return exit_code_;
  }

 private:
  void reaped(int ws) {
    close(c_.out_fd);
    c_ = {};
    exit_code_ = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
  }

  child c_;
  std::string line_;
  uint16_t port_ = 0;
  int exit_code_ = -1;
};

/// A file's bytes ("" when it cannot be read): a child's stderr file, a key, /proc/PID/cmdline.
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// A command run to its end: exit code (124 when it timed out, -1 when killed) and what it printed.
struct run_output {
  int rc = -1;
  std::string out, err;
};

/// Runs `args` (argv, not a shell line) to its end, bounded by GNU timeout (`timeout_s` seconds,
/// then SIGKILL 5 s later), stdin from /dev/null, stdout and stderr captured.
inline run_output run_to_end(const std::vector<std::string>& args, int timeout_s = 60) {
  static int calls = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tessera-run-" + std::to_string(getpid()) + "-" + std::to_string(++calls));
  std::filesystem::create_directories(dir);
  std::string cmd = "timeout -k 5 " + std::to_string(timeout_s);
  for (const auto& a : args) {
    std::string q;
    for (char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    cmd += " '" + q + "'";
  }
  const int ws = std::system((cmd + " < /dev/null > '" + (dir / "out").string() + "' 2> '" + (dir / "err").string() + "'").c_str());
  run_output r;
  r.rc = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  std::filesystem::remove_all(dir);
  return r;
}

/// The children of `parent` whose command name is `comm` (the kernel keeps its first 15 characters).
inline std::vector<pid_t> children_named(pid_t parent, const std::string& comm) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(entry.path() / "stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && state != 'Z' && line.substr(open + 1, close - open - 1) == comm.substr(0, 15))
      out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

/// True once every thread of `pid` is stopped (state T or t). SIGSTOP wakes one thread, which then
/// stops the others: on a loaded machine the rest can run on for milliseconds after kill() returns.
inline bool wait_stopped(pid_t pid, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  while (std::chrono::steady_clock::now() < until) {
    bool all = true, any = false;
    std::error_code ec;
    for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
      std::ifstream f(t.path() / "stat");
      std::string line;
      if (!std::getline(f, line)) continue;
      auto close = line.rfind(')');
      if (close == std::string::npos || close + 2 >= line.size()) continue;
      any = true;
      const char state = line[close + 2];
      if (state != 'T' && state != 't') all = false;
    }
    if (ec) return false;
    if (any && all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

/// SIGSTOP `pid` and wait until all its threads have stopped.
inline bool stop_process(pid_t pid) { return kill(pid, SIGSTOP) == 0 && wait_stopped(pid); }

}  // namespace tessera::test_support
