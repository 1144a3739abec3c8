# Third-party dependencies of megatron_lib, and which of them are optional.
#
# Required everywhere: OpenMP, nlohmann-json and CLI11 (header-only), PCRE2 and utf8proc
# (the GPT-2 and WordPiece tokenizers). Optional, each an AUTO|ON|OFF cache option (AUTO: used
# when found; ON: a configure error when missing; OFF: never used):
#   MEGATRON_USE_MPI            OpenMPI. Missing → a single-process build: the world is always a
#                               SoloCommunicator, and a process started by mpirun stops with
#                               an error that says so. tests/dist is not built.
#   MEGATRON_USE_OPENBLAS       f32 GEMM through OpenBLAS.
#   MEGATRON_USE_ONEDNN         f32/bf16 GEMM through oneDNN.
#                               Neither → the built-in blocked GEMM (kernels/cpu/blocked_gemm.h).
#   MEGATRON_USE_SENTENCEPIECE  SentencePieceTokenizer. Missing → the tokenizer reports at use
#                               that the binary was built without SentencePiece.
# CMAKE_DISABLE_FIND_PACKAGE_<MPI|OpenBLAS|dnnl|SentencePiece>=ON means the same as OFF.
#
# The bundle (scripts/gpu_bundle.sh): machines without Debian's -dev packages (the GPU machine's
# image) get the headers, googletest's sources, PCRE2/utf8proc static libraries and OpenMPI
# from Debian packages unpacked into MEGATRON_BUNDLE_DIR/root. Its usr/ is searched after the
# system's own prefixes, so a machine with the packages installed uses its own.
#
# Results: the INTERFACE target megatron_deps (link it for everything below), the variables
# MEGATRON_WITH_<MPI|OPENBLAS|ONEDNN|SENTENCEPIECE> (ON/OFF), MEGATRON_MPIEXEC (mpirun, when
# MPI is used) and MEGATRON_MPI_RUN_ENV (NAME=VALUE entries mpirun and the binaries need,
# empty unless MPI comes from the bundle).

include_guard(GLOBAL)

# ---- the bundle -------------------------------------------------------------------------------
set(MEGATRON_BUNDLE_DIR "${CMAKE_SOURCE_DIR}/.gpu-bundle" CACHE PATH
    "Unpacked Debian packages for machines without them (scripts/gpu_bundle.sh)")
set(MEGATRON_BUNDLE_PREFIX "")
if(EXISTS "${MEGATRON_BUNDLE_DIR}/root/usr")
  set(MEGATRON_BUNDLE_PREFIX "${MEGATRON_BUNDLE_DIR}/root/usr")
  # Searched last (after /usr/local, /usr, ...): a fallback, never a replacement.
  list(APPEND CMAKE_SYSTEM_PREFIX_PATH "${MEGATRON_BUNDLE_PREFIX}")
  message(STATUS "megatron: bundle ${MEGATRON_BUNDLE_PREFIX} (used for what the system lacks)")
endif()
if(CMAKE_LIBRARY_ARCHITECTURE)
  set(MEGATRON_MULTIARCH "${CMAKE_LIBRARY_ARCHITECTURE}")
else()
  set(MEGATRON_MULTIARCH "x86_64-linux-gnu")
endif()
set(MEGATRON_BUNDLE_LIBDIR "${MEGATRON_BUNDLE_PREFIX}/lib/${MEGATRON_MULTIARCH}")

add_library(megatron_deps INTERFACE)

# megatron_optional(<option> <package name for CMAKE_DISABLE_FIND_PACKAGE_*> <doc>): declares the
# AUTO|ON|OFF option and sets _megatron_try (whether to look for it at all).
macro(megatron_optional option package doc)
  set(${option} AUTO CACHE STRING "${doc}: AUTO (when found), ON (required) or OFF")
  set_property(CACHE ${option} PROPERTY STRINGS AUTO ON OFF)
  if(NOT ${option} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${option}=${${option}}: expected AUTO, ON or OFF")
  endif()
  set(_megatron_try ON)
  if(${option} STREQUAL OFF OR CMAKE_DISABLE_FIND_PACKAGE_${package})
    set(_megatron_try OFF)
  endif()
endmacro()

# megatron_optional_result(<option> <found> <name> <what it gives> <fallback>): one STATUS line
# per optional dependency; a FATAL_ERROR when it was required (ON) and not found.
function(megatron_optional_result option found name detail fallback)
  if(found)
    message(STATUS "megatron: ${name} ON (${detail})")
  elseif(${option} STREQUAL ON)
    message(FATAL_ERROR "${option}=ON but ${name} was not found. Install it (scripts/setup.sh), "
                        "or run scripts/gpu_bundle.sh, or configure with -D${option}=AUTO|OFF.")
  else()
    message(STATUS "megatron: ${name} OFF (${option}=${${option}}"
                   "${_megatron_reason}) -> ${fallback}")
  endif()
endfunction()

find_package(PkgConfig QUIET)

# ---- required: OpenMP, header-only libraries, PCRE2, utf8proc -------------------------------
find_package(OpenMP REQUIRED)
target_link_libraries(megatron_deps INTERFACE OpenMP::OpenMP_CXX)

foreach(pkg nlohmann_json CLI11)
  find_package(${pkg} CONFIG QUIET)
  if(NOT ${pkg}_FOUND)
    message(FATAL_ERROR "megatron: ${pkg} (header-only) not found: install Debian's "
                        "nlohmann-json3-dev / libcli11-dev (scripts/setup.sh), or run "
                        "scripts/gpu_bundle.sh on a machine that has apt and carry .gpu-bundle")
  endif()
endforeach()
target_link_libraries(megatron_deps INTERFACE nlohmann_json::nlohmann_json CLI11::CLI11)

# PCRE2, utf8proc and yaml-cpp (--export-kd-cfg's YAML): plain find_path/find_library (no
# pkg-config needed; the bundle keeps only their static libraries, so the binary needs no
# runtime package for them either).
function(megatron_required_c_library target header libname debian)
  string(MAKE_C_IDENTIFIER "${libname}" id)
  find_path(MEGATRON_${id}_INCLUDE_DIR ${header})
  find_library(MEGATRON_${id}_LIBRARY NAMES ${libname})
  if(NOT MEGATRON_${id}_INCLUDE_DIR OR NOT MEGATRON_${id}_LIBRARY)
    message(FATAL_ERROR "megatron: ${header} / lib${libname} not found: install Debian's "
                        "${debian} (scripts/setup.sh), or run scripts/gpu_bundle.sh")
  endif()
  add_library(${target} UNKNOWN IMPORTED)
  set_target_properties(${target} PROPERTIES
    IMPORTED_LOCATION "${MEGATRON_${id}_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${MEGATRON_${id}_INCLUDE_DIR}")
  target_link_libraries(megatron_deps INTERFACE ${target})
endfunction()
megatron_required_c_library(megatron::pcre2 pcre2.h pcre2-8 libpcre2-dev)
megatron_required_c_library(megatron::utf8proc utf8proc.h utf8proc libutf8proc-dev)
megatron_required_c_library(megatron::yaml_cpp yaml-cpp/yaml.h yaml-cpp libyaml-cpp-dev)

# ---- optional: MPI ------------------------------------------------------------------------------
megatron_optional(MEGATRON_USE_MPI MPI "Use MPI (OpenMPI) for multi-process runs")
set(MEGATRON_WITH_MPI OFF)
set(MEGATRON_MPIEXEC "")
set(MEGATRON_MPI_RUN_ENV "")
set(_megatron_reason "")
if(_megatron_try)
  find_package(MPI QUIET COMPONENTS CXX)
  if(MPI_CXX_FOUND AND MPIEXEC_EXECUTABLE)
    set(MEGATRON_WITH_MPI ON)
    set(MEGATRON_MPIEXEC "${MPIEXEC_EXECUTABLE}")
    target_link_libraries(megatron_deps INTERFACE MPI::MPI_CXX)
    set(_megatron_mpi_detail "${MPIEXEC_EXECUTABLE}")
  elseif(MEGATRON_BUNDLE_PREFIX AND EXISTS "${MEGATRON_BUNDLE_LIBDIR}/openmpi/include/mpi.h"
         AND EXISTS "${MEGATRON_BUNDLE_PREFIX}/bin/orterun")
    # Debian's OpenMPI unpacked in the bundle: relocated through OPAL_PREFIX (OpenMPI's own
    # mechanism) and LD_LIBRARY_PATH, which is what mpirun and every rank need to run.
    find_library(MEGATRON_BUNDLE_MPI_LIBRARY mpi PATHS "${MEGATRON_BUNDLE_LIBDIR}/openmpi/lib"
                 NO_DEFAULT_PATH)
    if(MEGATRON_BUNDLE_MPI_LIBRARY)
      set(MEGATRON_WITH_MPI ON)
      # The real file, beside libopen-rte, libopen-pal, libhwloc, ...: its folder becomes the
      # rpath, where the linker and the loader find those too.
      get_filename_component(_megatron_libmpi "${MEGATRON_BUNDLE_MPI_LIBRARY}" REALPATH)
      add_library(megatron::bundled_mpi UNKNOWN IMPORTED)
      set_target_properties(megatron::bundled_mpi PROPERTIES
        IMPORTED_LOCATION "${_megatron_libmpi}"
        INTERFACE_INCLUDE_DIRECTORIES "${MEGATRON_BUNDLE_LIBDIR}/openmpi/include"
        # The C API only: no OpenMPI C++ bindings (FindMPI would link libmpi_cxx for them).
        INTERFACE_COMPILE_DEFINITIONS "OMPI_SKIP_MPICXX=1")
      # Debian's libmpi carries a RUNPATH of /usr/...; so that a binary started without mpirun
      # (and its environment) still loads, the binary itself needs libmpi's dependencies, found
      # through its own rpath (the bundle's folder): once loaded, they satisfy libmpi too.
      set(_megatron_mpi_deps "")
      foreach(soname libopen-rte.so.40 libopen-pal.so.40 libhwloc.so.15 libevent_core-2.1.so.7
                     libevent_pthreads-2.1.so.7)
        if(EXISTS "${MEGATRON_BUNDLE_LIBDIR}/${soname}")
          list(APPEND _megatron_mpi_deps "${MEGATRON_BUNDLE_LIBDIR}/${soname}")
        endif()
      endforeach()
      target_link_libraries(megatron_deps INTERFACE megatron::bundled_mpi
        "-Wl,--push-state,--no-as-needed" ${_megatron_mpi_deps} "-Wl,--pop-state")
      set(MEGATRON_MPIEXEC "${MEGATRON_BUNDLE_PREFIX}/bin/orterun")
      set(MEGATRON_MPI_RUN_ENV
        "OPAL_PREFIX=${MEGATRON_BUNDLE_PREFIX}"
        "PMIX_MCA_mca_base_component_path=${MEGATRON_BUNDLE_LIBDIR}/pmix2/lib/pmix"
        "LD_LIBRARY_PATH=${MEGATRON_BUNDLE_LIBDIR}:$ENV{LD_LIBRARY_PATH}")
      set(_megatron_mpi_detail "bundled OpenMPI, ${MEGATRON_MPIEXEC}")
    endif()
  endif()
  if(NOT MEGATRON_WITH_MPI)
    set(_megatron_reason ", not found")
  endif()
endif()
megatron_optional_result(MEGATRON_USE_MPI "${MEGATRON_WITH_MPI}" MPI "${_megatron_mpi_detail}"
  "single-process build: SoloCommunicator only, mpirun launches stop with an error, no tests/dist")

# ---- optional: OpenBLAS -----------------------------------------------------------------------
megatron_optional(MEGATRON_USE_OPENBLAS OpenBLAS "Use OpenBLAS for f32 GEMM")
set(MEGATRON_WITH_OPENBLAS OFF)
set(_megatron_reason "")
# Debian ships OpenBLAS built three ways; the OpenMP build (libopenblas-openmp-dev) runs its
# GEMMs on OpenMP's thread pool, the one every other kernel uses, where the default pthreads
# build keeps a second pool that hands the cores back and forth with OpenMP's: one pool made the
# 1 process x 2 threads GPT-2 step 2-15% faster with a third of the system time or less
# (bench/RESULTS.md, issue 17 §6-7). Its pkg-config file lives in the build's own folder, and
# the loader would pick whichever build Debian's alternatives select for libopenblas.so.0, so
# the folder also goes into the binaries' RUNPATH (searched before the loader's cache).
# Without it: any OpenBLAS.
set(_megatron_openblas_openmp "")
if(CMAKE_LIBRARY_ARCHITECTURE)
  set(_megatron_openblas_openmp "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp")
endif()
if(_megatron_try AND PkgConfig_FOUND)
  if(_megatron_openblas_openmp AND EXISTS "${_megatron_openblas_openmp}/pkgconfig/openblas.pc")
    set(_megatron_saved_pkg_config_path "$ENV{PKG_CONFIG_PATH}")
    set(ENV{PKG_CONFIG_PATH} "${_megatron_openblas_openmp}/pkgconfig")
    # Its own prefix: pkg_check_modules caches a result per prefix and arguments.
    pkg_check_modules(OPENBLAS_OPENMP QUIET IMPORTED_TARGET openblas)
    set(ENV{PKG_CONFIG_PATH} "${_megatron_saved_pkg_config_path}")
  endif()
  if(OPENBLAS_OPENMP_FOUND)
    set(MEGATRON_WITH_OPENBLAS ON)
    target_link_libraries(megatron_deps INTERFACE PkgConfig::OPENBLAS_OPENMP)
    set(OPENBLAS_VERSION "${OPENBLAS_OPENMP_VERSION} (OpenMP build)")
    # The build tree's RUNPATH gets the folder from the full library path; the install tree's
    # from this.
    list(APPEND CMAKE_INSTALL_RPATH "${_megatron_openblas_openmp}")
  else()
    pkg_check_modules(OPENBLAS QUIET IMPORTED_TARGET openblas)
    if(OPENBLAS_FOUND)
      set(MEGATRON_WITH_OPENBLAS ON)
      target_link_libraries(megatron_deps INTERFACE PkgConfig::OPENBLAS)
    endif()
  endif()
endif()
if(_megatron_try AND NOT MEGATRON_WITH_OPENBLAS)
  set(_megatron_reason ", not found")
endif()
megatron_optional_result(MEGATRON_USE_OPENBLAS "${MEGATRON_WITH_OPENBLAS}" OpenBLAS
  "${OPENBLAS_VERSION}" "f32 GEMM through oneDNN or the built-in blocked GEMM")

# ---- optional: oneDNN -------------------------------------------------------------------------
megatron_optional(MEGATRON_USE_ONEDNN dnnl "Use oneDNN for f32/bf16 GEMM")
set(MEGATRON_WITH_ONEDNN OFF)
set(_megatron_reason "")
if(_megatron_try)
  find_package(dnnl CONFIG QUIET)
  if(dnnl_FOUND)
    set(MEGATRON_WITH_ONEDNN ON)
    target_link_libraries(megatron_deps INTERFACE DNNL::dnnl)
  else()
    set(_megatron_reason ", not found")
  endif()
endif()
megatron_optional_result(MEGATRON_USE_ONEDNN "${MEGATRON_WITH_ONEDNN}" oneDNN "${dnnl_VERSION}"
  "bf16 GEMMs widened to f32")
if(NOT MEGATRON_WITH_OPENBLAS AND NOT MEGATRON_WITH_ONEDNN)
  message(STATUS "megatron: CPU GEMM = built-in blocked GEMM (OpenMP), no BLAS library found")
endif()

# ---- optional: SentencePiece ------------------------------------------------------------------
megatron_optional(MEGATRON_USE_SENTENCEPIECE SentencePiece "Build SentencePieceTokenizer")
set(MEGATRON_WITH_SENTENCEPIECE OFF)
set(_megatron_reason "")
if(_megatron_try AND PkgConfig_FOUND)
  pkg_check_modules(SENTENCEPIECE QUIET IMPORTED_TARGET sentencepiece)
  if(SENTENCEPIECE_FOUND)
    set(MEGATRON_WITH_SENTENCEPIECE ON)
    target_link_libraries(megatron_deps INTERFACE PkgConfig::SENTENCEPIECE)
  endif()
endif()
if(_megatron_try AND NOT MEGATRON_WITH_SENTENCEPIECE)
  set(_megatron_reason ", not found")
endif()
megatron_optional_result(MEGATRON_USE_SENTENCEPIECE "${MEGATRON_WITH_SENTENCEPIECE}"
  SentencePiece "${SENTENCEPIECE_VERSION}"
  "--tokenizer-type SentencePieceTokenizer reports that it was not built")

# Compile definitions: MEGATRON_HAS_<X>=1 for each optional dependency built in.
foreach(dep MPI OPENBLAS ONEDNN SENTENCEPIECE)
  if(MEGATRON_WITH_${dep})
    target_compile_definitions(megatron_deps INTERFACE MEGATRON_HAS_${dep}=1)
  endif()
endforeach()

# For scripts (scripts/gpu_check.sh): what this build tree was configured with, as shell lines.
set(_megatron_features "# written by cmake/MegatronDependencies.cmake\n")
foreach(dep CUDA MPI OPENBLAS ONEDNN SENTENCEPIECE)
  if(MEGATRON_WITH_${dep})
    string(APPEND _megatron_features "MEGATRON_WITH_${dep}=ON\n")
  else()
    string(APPEND _megatron_features "MEGATRON_WITH_${dep}=OFF\n")
  endif()
endforeach()
if(MEGATRON_MPI_RUN_ENV)
  string(APPEND _megatron_features "MEGATRON_MPI_FROM_BUNDLE=1\n")
else()
  string(APPEND _megatron_features "MEGATRON_MPI_FROM_BUNDLE=0\n")
endif()
string(APPEND _megatron_features "MEGATRON_MPIEXEC='${MEGATRON_MPIEXEC}'\n")
file(WRITE "${CMAKE_BINARY_DIR}/megatron_features.sh" "${_megatron_features}")
