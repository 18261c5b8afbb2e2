#include "tessera/serving/journal.hpp"

#include <unistd.h>

#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

namespace tessera::serving {

std::string previous_instance::describe() const {
  if (!present) return "no earlier host process in the journal";
  std::ostringstream os;
  os << "the previous host process (pid " << pid << ", started at unix time " << started_unix << ") accepted "
     << accepted << " requests and answered " << answered << "; the other " << unanswered()
     << " were lost when it stopped and were never answered: clients should send them again";
  return os.str();
}

result<std::unique_ptr<request_journal>> request_journal::open(const std::string& path) {
  std::unique_ptr<request_journal> j(new request_journal());
  {
    std::ifstream in(path);
    std::string line;
    std::set<uint64_t> open_ids;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      char kind = 0;
      ls >> kind;
      if (kind == 'S') {
        j->previous_ = {};
        open_ids.clear();
        j->previous_.present = true;
        ls >> j->previous_.pid >> j->previous_.started_unix;
      } else if (kind == 'A') {
        uint64_t id = 0;
        if (ls >> id) {
          open_ids.insert(id);
          ++j->previous_.accepted;
        }
      } else if (kind == 'D') {
        uint64_t id = 0;
        if (ls >> id && open_ids.erase(id)) ++j->previous_.answered;
      }  // anything else (a torn last line) is ignored
    }
  }
  j->file_ = std::fopen(path.c_str(), "w");
  if (!j->file_) return status::io_error("cannot write the request journal " + path + "; choose another --journal");
  std::fprintf(j->file_, "S %lld %lld\n", static_cast<long long>(getpid()), static_cast<long long>(std::time(nullptr)));
  std::fflush(j->file_);
  return j;
}

request_journal::~request_journal() {
  if (file_) std::fclose(file_);
}

uint64_t request_journal::accepted() {
  std::lock_guard lk(mu_);
  const uint64_t id = next_++;
  std::fprintf(file_, "A %llu\n", static_cast<unsigned long long>(id));
  std::fflush(file_);
  return id;
}

void request_journal::answered(uint64_t id, unsigned http_status) {
  std::lock_guard lk(mu_);
  std::fprintf(file_, "D %llu %u\n", static_cast<unsigned long long>(id), http_status);
  std::fflush(file_);
}

}  // namespace tessera::serving
