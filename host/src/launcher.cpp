#include "tessera/host/launcher.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <cstdlib>
#include <thread>

extern char** environ;

namespace tessera::host {

std::string default_bin_dir() {
  if (const char* d = std::getenv("TESSERA_BIN_DIR"); d && *d) return d;
  char buf[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

int spawn_child(pid_t* pid, const std::string& path, const void* file_actions, char* const argv[]) {
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, stops;
  sigemptyset(&none);
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &stops);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  int rc = posix_spawn(pid, path.c_str(), static_cast<const posix_spawn_file_actions_t*>(file_actions), &attr, argv,
                       environ);
  posix_spawnattr_destroy(&attr);
  return rc;
}

local_launcher::local_launcher(local_launcher_config cfg) : cfg_(std::move(cfg)) {
  if (cfg_.tile_binary.empty()) cfg_.tile_binary = default_bin_dir() + "/tessera-tile";
}

result<pid_t> local_launcher::spawn(const std::vector<std::string>& args, uint32_t tile_id) {
  if (access(cfg_.tile_binary.c_str(), X_OK) != 0)
    return status::not_found("tile executable " + cfg_.tile_binary +
                             " is missing or not executable; build it (scripts/setup) or set TESSERA_BIN_DIR");
  std::vector<std::string> argv_s{cfg_.tile_binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  argv_s.push_back("--die-with-parent");
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // The tile gets stdin, stdout and stderr only. Without this a tile restarted while the host
  // serves inherited the HTTP listening socket and every client connection open at that moment
  // (Asio does not open them close-on-exec) and held them for its whole life (scripts/soak).
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  std::string log_path;
  if (!cfg_.log_dir.empty()) {
    log_path = cfg_.log_dir + "/tile-" + std::to_string(tile_id) + ".log";
    posix_spawn_file_actions_addopen(&fa, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = 0;
  int rc = spawn_child(&pid, cfg_.tile_binary, &fa, argv.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    return status::io_error("cannot start " + cfg_.tile_binary + ": " + std::strerror(rc) +
                            (log_path.empty() ? std::string()
                                              : " (or cannot open its log " + log_path + ": does the log directory exist?)"));
  if (cfg_.pin_cores) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<int>(tile_id % static_cast<uint32_t>(cores > 0 ? cores : 1)), &set);
    sched_setaffinity(pid, sizeof set, &set);
  }
  return pid;
}

std::optional<std::string> local_launcher::poll_exit(pid_t pid) {
  int st = 0;
  pid_t r = waitpid(pid, &st, WNOHANG);
  if (r == 0) return std::nullopt;
  if (r < 0) return std::string("is gone");
  if (WIFSIGNALED(st)) return "was killed by signal " + std::to_string(WTERMSIG(st));
  return "exited with code " + std::to_string(WEXITSTATUS(st));
}

void local_launcher::stop(pid_t pid, int grace_ms) {
  if (pid <= 0) return;
  if (kill(pid, SIGTERM) != 0) {
    waitpid(pid, nullptr, WNOHANG);
    return;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, nullptr, WNOHANG) != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace tessera::host
