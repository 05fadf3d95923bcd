// Runs a program (alone, or under `mpirun -np N --oversubscribe`) for the tests: its output,
// the exit status, and a timeout after which the whole process tree (mpirun and its ranks)
// is killed, so a hang fails the test instead of hanging CI.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <dirent.h>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace linnet::testing {

struct MpiRunResult {
  int exit_code = -1;     // the status mpirun exited with; 128 + signal when killed by one
  bool timed_out = false;  // killed after the timeout
  double seconds = 0;
  std::string output;  // stdout and stderr, interleaved (stdout alone with split_stderr)
  std::string errors;  // stderr, with split_stderr
};

// Full path of mpirun on PATH, or "" when there is none.
inline std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    if (!dir.empty()) {
      std::string candidate = dir + "/mpirun";
      struct stat st;
      if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
        return candidate;
    }
    start = end + 1;
  }
  return "";
}

// SIGKILL to pid, all its descendants and its process group. OpenMPI puts each rank in a
// process group of its own, so killing mpirun's group alone would orphan them: the tree is
// read from /proc (parent ids) before anything is killed.
inline void kill_tree(pid_t root) {
  std::vector<std::pair<pid_t, pid_t>> parent_of;  // (pid, ppid)
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      const pid_t p = static_cast<pid_t>(std::atoi(e->d_name));
      if (p <= 0) continue;
      std::string path = "/proc/" + std::string(e->d_name) + "/stat";
      if (FILE* f = std::fopen(path.c_str(), "r")) {
        char line[1024] = {};
        const size_t n = std::fread(line, 1, sizeof line - 1, f);
        std::fclose(f);
        line[n] = 0;
        // pid (comm) state ppid …: comm may hold spaces, so parse after the last ')'.
        if (const char* close = std::strrchr(line, ')')) {
          char state = 0;
          int ppid = 0;
          if (std::sscanf(close + 1, " %c %d", &state, &ppid) == 2) parent_of.emplace_back(p, ppid);
        }
      }
    }
    ::closedir(d);
  }
  std::vector<pid_t> tree = {root};
  for (size_t i = 0; i < tree.size(); ++i)
    for (auto [p, pp] : parent_of)
      if (pp == tree[i]) tree.push_back(p);
  for (pid_t p : tree) ::kill(p, SIGKILL);
  ::kill(-root, SIGKILL);
}

// Runs argv[0] (a full path) with argv, stdin from /dev/null, killing its whole process tree
// after timeout_s. OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1 are added to the environment (CI
// containers run as root). split_stderr: `output` gets stdout alone and `errors` stderr;
// otherwise both go to `output`, interleaved.
inline MpiRunResult run_command(std::vector<std::string> argv_s, double timeout_s = 60, bool split_stderr = false) {
  MpiRunResult result;
  // Everything the child needs is built before fork (only async-signal-safe calls after it).
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "OMPI_ALLOW_RUN_AS_ROOT", 22) == 0) continue;
    env_s.emplace_back(*e);
  }
  env_s.emplace_back("OMPI_ALLOW_RUN_AS_ROOT=1");
  env_s.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out[2], err[2];
  if (::pipe(out) != 0 || ::pipe(err) != 0) {
    result.output = "pipe failed";
    return result;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    result.output = "fork failed";
    return result;
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // its own process group: the timeout kills it and every child
    ::dup2(out[1], 1);
    ::dup2(split_stderr ? err[1] : out[1], 2);
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so the group exists before any kill
  ::close(out[1]);
  ::close(err[1]);
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  char buf[4096];
  pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sink[2] = {&result.output, &result.errors};
  int open = 2;
  while (open > 0) {
    const double left = timeout_s - elapsed();
    if (left <= 0) {
      result.timed_out = true;
      break;
    }
    const int ready = ::poll(p, 2, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t got = ::read(p[i].fd, buf, sizeof buf);
      if (got > 0) {
        sink[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(p[i].fd);
        p[i].fd = -1;
        --open;
      }
    }
  }
  if (result.timed_out) kill_tree(pid);
  for (auto& q : p)
    if (q.fd >= 0) ::close(q.fd);
  // Output closed (every process gone) or timed out; mpirun may still be tidying up.
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (elapsed() > timeout_s + 5) {
      result.timed_out = true;
      kill_tree(pid);
      ::waitpid(pid, &status, 0);
      break;
    }
    ::usleep(10000);
  }
  result.seconds = elapsed();
  if (WIFEXITED(status))
    result.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    result.exit_code = 128 + WTERMSIG(status);
  return result;
}

// The limit an mpirun gets: the test's own, or less where LINNET_TEST_MPI_TIMEOUT (seconds)
// says so — scripts/gpu-check sets 60, so that a hung two-rank test costs a minute of a GPU
// run's budget, not the five its author allowed on a slow CPU.
inline double mpi_timeout(double timeout_s) {
  if (const char* v = std::getenv("LINNET_TEST_MPI_TIMEOUT")) {
    const double cap = std::atof(v);
    if (cap > 0 && cap < timeout_s) return cap;
  }
  return timeout_s;
}

// Runs `mpirun -np <np> --oversubscribe <program> <args…>` through run_command.
inline MpiRunResult mpi_run(int np, const std::string& program, const std::vector<std::string>& args,
                            double timeout_s = 60, bool split_stderr = false) {
  timeout_s = mpi_timeout(timeout_s);
  const std::string mpirun = find_mpirun();
  if (mpirun.empty()) {
    MpiRunResult result;
    result.output = "mpirun not found on PATH";
    return result;
  }
  std::vector<std::string> argv = {mpirun, "-np", std::to_string(np), "--oversubscribe", program};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, timeout_s, split_stderr);
}

// The mpi_comm_check binary (tests/mpi_comm_check.cpp), or "" when MPI was not found.
inline std::string comm_check() {
#ifdef LINNET_MPI_COMM_CHECK
  return LINNET_MPI_COMM_CHECK;
#else
  return "";
#endif
}

// The linnet binary with args (stdout and stderr apart), alone or under mpirun -np np.
inline MpiRunResult linnet_run(std::vector<std::string> args, double timeout_s = 120, int np = 0) {
  if (np > 0) return mpi_run(np, LINNET_BINARY, args, timeout_s, true);
  args.insert(args.begin(), LINNET_BINARY);
  return run_command(args, timeout_s, true);
}

// A program left running in the background (its own process group; stdout and stderr read
// from a pipe into `output`), its whole process tree killed when this goes out of scope: a
// server under test.
class BackgroundProcess {
 public:
  explicit BackgroundProcess(std::vector<std::string> argv_s) {
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
    env_s.emplace_back("OMPI_ALLOW_RUN_AS_ROOT=1");
    env_s.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    int out[2];
    if (::pipe(out) != 0) return;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      ::close(out[0]);
      ::close(out[1]);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(out[1]);
    pid_ = pid;
    fd_ = out[0];
  }
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;
  ~BackgroundProcess() {
    if (pid_ > 0) {
      kill_tree(pid_);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  // Reads output until `marker` appears (true) or the program ends or timeout_s passes (false).
  bool wait_for(const std::string& marker, double timeout_s) {
    const auto t0 = std::chrono::steady_clock::now();
    char buf[4096];
    while (output.find(marker) == std::string::npos) {
      const double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (left <= 0 || fd_ < 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::min(left, 1.0) * 1000) + 1) <= 0) continue;
      const ssize_t got = ::read(fd_, buf, sizeof buf);
      if (got <= 0) return false;
      output.append(buf, static_cast<size_t>(got));
    }
    return true;
  }

  // `linnet serve --port 0`: the port it says it listens on once ready; 0 when it never does.
  int serving_port(double timeout_s) {
    const std::string marker = "listening on http://";
    if (!wait_for(marker, timeout_s) || !wait_for("\n", 1)) return 0;
    const size_t at = output.find(marker) + marker.size();
    const std::string hostport = output.substr(at, output.find_first_of(" \n", at) - at);
    const size_t colon = hostport.rfind(':');
    return colon == std::string::npos ? 0 : std::atoi(hostport.c_str() + colon + 1);
  }

  std::string output;

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

}  // namespace linnet::testing
