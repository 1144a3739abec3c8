# GoogleTest for tests/: the installed package (Debian's libgtest-dev/libgmock-dev) when there is
# one, else built from sources: Debian's `googletest` package (/usr/src/googletest), or the same
# package unpacked in the bundle (scripts/gpu_bundle.sh) on machines without it. Either way the
# targets GTest::gtest (with gmock's headers), GTest::gtest_main, GTest::gmock exist afterwards.
include_guard(GLOBAL)

find_package(GTest QUIET)
if(GTest_FOUND AND TARGET GTest::gtest AND TARGET GTest::gtest_main)
  if(NOT TARGET GTest::gmock)
    find_library(MEGATRON_GMOCK_LIBRARY gmock)
    if(MEGATRON_GMOCK_LIBRARY)
      add_library(GTest::gmock UNKNOWN IMPORTED)
      set_target_properties(GTest::gmock PROPERTIES IMPORTED_LOCATION "${MEGATRON_GMOCK_LIBRARY}"
                                                    INTERFACE_LINK_LIBRARIES GTest::gtest)
    endif()
  endif()
  message(STATUS "megatron: GoogleTest installed (${GTest_VERSION})")
  return()
endif()

set(_megatron_gtest_sources "")
foreach(dir "${MEGATRON_BUNDLE_PREFIX}/src/googletest" /usr/src/googletest)
  if(EXISTS "${dir}/googletest/CMakeLists.txt" AND EXISTS "${dir}/googlemock/CMakeLists.txt")
    set(_megatron_gtest_sources "${dir}")
    break()
  endif()
endforeach()
if(NOT _megatron_gtest_sources)
  message(FATAL_ERROR "megatron: GoogleTest not found: install Debian's libgtest-dev and "
                      "libgmock-dev or googletest (sources), or run scripts/gpu_bundle.sh, or "
                      "configure with -DBUILD_TESTING=OFF")
endif()
message(STATUS "megatron: GoogleTest built from ${_megatron_gtest_sources}")
set(BUILD_GMOCK ON CACHE BOOL "" FORCE)
set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
set(gtest_force_shared_crt ON CACHE BOOL "" FORCE)
# SYSTEM: its headers count as system headers in our targets (no warnings from them).
add_subdirectory("${_megatron_gtest_sources}" "${CMAKE_BINARY_DIR}/googletest" EXCLUDE_FROM_ALL
                 SYSTEM)
# Its sources are not ours: project-wide -Werror must not stop the build on their warnings.
foreach(lib gtest gtest_main gmock gmock_main)
  target_compile_options(${lib} PRIVATE -w)
endforeach()
# Some tests include <gmock/gmock.h> for matchers while linking gtest only, which works where
# the headers share /usr/include; here the headers are in two trees.
target_include_directories(gtest SYSTEM INTERFACE "${_megatron_gtest_sources}/googlemock/include")
# GoogleTest 1.11+ defines the GTest:: aliases itself; older sources do not.
foreach(lib gtest gtest_main gmock gmock_main)
  if(NOT TARGET GTest::${lib})
    add_library(GTest::${lib} ALIAS ${lib})
  endif()
endforeach()
