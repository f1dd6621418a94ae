// Runs an external tool (the C++ compiler, ptxas, nvdisasm) as a child this process can bound
// and kill: an argument vector executed directly (no shell to reinterpret a path or a quote), its
// own process group (helpers it starts die with it), stdin from /dev/null, stdout and stderr
// captured together, a deadline.
//
// Precondition: argv[0] is a path to an executable (no PATH search is done); the caller does not
// ignore SIGCHLD (the exit status could not be collected). Postcondition of run_process: the child
// has exited or its whole process group was SIGKILLed, and it has been reaped, before the call
// returns; nothing is left running that was started by it except descendants that left its group.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace dnnfusion {

// Diagnostics only: a tool stuck printing errors must not grow this process without bound.
constexpr size_t kMaxProcessOutput = size_t{1} << 20;

struct ProcessResult {
  int status = 0;          // waitpid status (use WIFEXITED etc., or describe_status)
  bool timed_out = false;  // killed at the deadline; status then says SIGKILL
  std::string output;      // stdout and stderr interleaved, at most max_output bytes
  bool output_truncated = false;  // the child wrote more than max_output bytes (the rest was read and dropped)
  // Exited by itself with status 0.
  bool succeeded() const;
};

// Runs argv (argv[0] a path) with exactly the environment `env` ("NAME=value" strings) for at
// most timeout_s seconds. `label` names the program in error messages ("the C++ compiler", "ptxas").
// Output beyond `max_output` bytes is drained and dropped (output_truncated says so): a caller that
// parses the output (a disassembly) raises the limit and checks the flag.
// Throws dnnfusion::Error only when the child cannot be started or waited for; a failing, crashing
// or hanging child is reported in the result.
ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env, double timeout_s,
                          const std::string& label = "the program", size_t max_output = kMaxProcessOutput);

// This process's environment as "NAME=value" strings, without the variables named in `drop`.
std::vector<std::string> current_environment(const std::vector<std::string>& drop = {});

// For messages only: the command as one could paste it into a shell.
std::string display_command(const std::vector<std::string>& argv);

// "exited with status 1", "was killed by signal 9 (Killed)": for messages about a ProcessResult.
std::string describe_status(int status);

// The time limit of every compiler and tool run on generated code (C++ compiler, ptxas,
// nvdisasm): $DNNFUSION_COMPILE_TIMEOUT in seconds, default kDefaultCompileTimeoutS; a value that is
// not a positive number is an InvalidInput error naming the variable.
constexpr double kDefaultCompileTimeoutS = 300;
constexpr const char* kCompileTimeoutVar = "DNNFUSION_COMPILE_TIMEOUT";
double compile_timeout_seconds();

// "2.5", "300": seconds as messages print them.
std::string format_seconds(double s);

}  // namespace dnnfusion
