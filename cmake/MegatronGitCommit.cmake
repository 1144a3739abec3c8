# Run at every build (cmake -P, from src/CMakeLists.txt's megatron_git_commit target): writes
# OUTPUT, one C++ string literal naming the checkout's commit ("c3b56f1a2b3c", "c3b56f1a2b3c
# with local changes", or "unknown (not built from a git checkout)") for `megatron --version`.
# The file is rewritten only when the text changes, so a build at the same commit recompiles
# nothing.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE status ERROR_QUIET)
if(NOT status EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown (not built from a git checkout)")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" diff --quiet HEAD --
                  RESULT_VARIABLE dirty ERROR_QUIET)
  if(NOT dirty EQUAL 0)
    string(APPEND commit " with local changes")
  endif()
endif()
set(text "\"${commit}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE "${OUTPUT}" "${text}")
endif()
