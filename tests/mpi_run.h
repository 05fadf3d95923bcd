// Runs a program under `mpirun -np N --oversubscribe` for the tests: combined stdout+stderr,
// the exit status, and a timeout after which the whole process group (mpirun and its ranks)
// is killed with mpirun and every rank, so a hang fails the test instead of hanging CI.
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
  std::string output;  // stdout and stderr, interleaved
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

// Runs `mpirun -np <np> --oversubscribe <program> <args…>`; OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1
// are added to the environment (CI containers run as root).
inline MpiRunResult mpi_run(int np, const std::string& program, const std::vector<std::string>& args,
                            double timeout_s = 60) {
  MpiRunResult result;
  const std::string mpirun = find_mpirun();
  if (mpirun.empty()) {
    result.output = "mpirun not found on PATH";
    return result;
  }
  // Everything the child needs is built before fork (only async-signal-safe calls after it).
  std::vector<std::string> argv_s = {mpirun, "-np", std::to_string(np), "--oversubscribe", program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
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

  int fds[2];
  if (::pipe(fds) != 0) {
    result.output = "pipe failed";
    return result;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    result.output = "fork failed";
    return result;
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // its own process group: the timeout kills mpirun and every rank
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so the group exists before any kill
  ::close(fds[1]);
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  char buf[4096];
  bool open = true;
  while (open) {
    const double left = timeout_s - elapsed();
    if (left <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got > 0)
      result.output.append(buf, static_cast<size_t>(got));
    else if (got == 0 || errno != EINTR)
      open = false;
  }
  if (result.timed_out) kill_tree(pid);
  ::close(fds[0]);
  // Output closed (every rank gone) or timed out; mpirun may still be tidying up.
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

}  // namespace linnet::testing
