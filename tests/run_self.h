// This test binary again, running one test with an environment variable set: for the switches a
// process reads once (LINNET_CPU_DOT, LINNET_QUANT_ROUNDING), checked in a child.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>

namespace linnet::testutil {

// `variable`=`value` this binary --gtest_filter=`test`: its exit code and output.
inline std::pair<int, std::string> run_self(const std::string& variable, const std::string& value,
                                            const std::string& test) {
  const std::string cmd = variable + "=" + value + " /proc/" + std::to_string(::getpid()) + "/exe --gtest_filter=" +
                          test + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  return {WEXITSTATUS(pclose(p)), out};
}

}  // namespace linnet::testutil
