#include "tessera/common/cpu_time.hpp"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace tessera {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double self_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double cpu_seconds_of(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  // "pid (comm) state ...": comm may hold spaces and parentheses, so fields count from the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 13 && rest >> field; ++i) {
  }
  unsigned long long utime = 0, stime = 0;
  if (!(rest >> utime >> stime)) return 0;  // fields 14 and 15, in clock ticks
  static const double tick = double(sysconf(_SC_CLK_TCK));
  return double(utime + stime) / tick;
}

double cpu_seconds_of(const std::vector<pid_t>& pids) {
  double s = 0;
  for (pid_t p : pids) s += cpu_seconds_of(p);
  return s;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace tessera
