# NCCL and cuBLASLt for the CUDA backend, found in the CUDA toolkit (/usr/local/cuda on the CI
# machines) or, where the toolkit lacks them, in the NVIDIA wheels of the python3 on PATH
# (site-packages/nvidia/<package>/{lib,include}: the GPU machine's image has NCCL and cuBLAS only
# there). Wheels ship versioned libraries only (libnccl.so.2), so those names are searched too.
# Needs find_package(CUDAToolkit) first. Results: NCCL_LIBRARY, NCCL_INCLUDE_DIR, the targets
# CUDA::cublasLt and CUDA::cudart (made here when FindCUDAToolkit did not make them), and
# MEGATRON_CUBLASLT_PATH, CUDA::cublasLt's library file (megatron dlopen()s it rather than
# linking it: src/kernels/cuda/cublaslt_library.h).
include_guard(GLOBAL)

set(MEGATRON_NVIDIA_WHEEL_LIBS "")
set(MEGATRON_NVIDIA_WHEEL_INCLUDES "")
find_program(MEGATRON_PYTHON3 NAMES python3)
if(MEGATRON_PYTHON3)
  execute_process(
    COMMAND "${MEGATRON_PYTHON3}" -c
            "import site, sysconfig; print(';'.join([sysconfig.get_paths()['purelib']] + site.getsitepackages()))"
    OUTPUT_VARIABLE _megatron_site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
    RESULT_VARIABLE _megatron_site_rc)
  if(_megatron_site_rc EQUAL 0)
    foreach(dir ${_megatron_site})
      file(GLOB _libs LIST_DIRECTORIES true "${dir}/nvidia/*/lib")
      file(GLOB _incs LIST_DIRECTORIES true "${dir}/nvidia/*/include")
      list(APPEND MEGATRON_NVIDIA_WHEEL_LIBS ${_libs})
      list(APPEND MEGATRON_NVIDIA_WHEEL_INCLUDES ${_incs})
    endforeach()
    list(REMOVE_DUPLICATES MEGATRON_NVIDIA_WHEEL_LIBS)
    list(REMOVE_DUPLICATES MEGATRON_NVIDIA_WHEEL_INCLUDES)
  endif()
endif()

find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
             HINTS ${CUDAToolkit_LIBRARY_DIR} ${MEGATRON_NVIDIA_WHEEL_LIBS})
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${MEGATRON_NVIDIA_WHEEL_INCLUDES})
if(NOT NCCL_LIBRARY OR NOT NCCL_INCLUDE_DIR)
  message(FATAL_ERROR "megatron: NCCL not found (nccl.h: ${NCCL_INCLUDE_DIR}, libnccl: "
                      "${NCCL_LIBRARY}); looked in the CUDA toolkit and in python3's "
                      "site-packages/nvidia/*. Set NCCL_LIBRARY and NCCL_INCLUDE_DIR, or "
                      "configure with -DMEGATRON_CUDA=OFF")
endif()

if(NOT TARGET CUDA::cublasLt)
  find_library(MEGATRON_CUBLASLT_LIBRARY NAMES cublasLt libcublasLt.so.13 libcublasLt.so.12
               HINTS ${MEGATRON_NVIDIA_WHEEL_LIBS})
  find_path(MEGATRON_CUBLASLT_INCLUDE_DIR cublasLt.h HINTS ${MEGATRON_NVIDIA_WHEEL_INCLUDES})
  if(NOT MEGATRON_CUBLASLT_LIBRARY OR NOT MEGATRON_CUBLASLT_INCLUDE_DIR)
    message(FATAL_ERROR "megatron: cuBLASLt not found in the CUDA toolkit "
                        "(${CUDAToolkit_LIBRARY_DIR}) nor in python3's site-packages/nvidia/*")
  endif()
  add_library(CUDA::cublasLt UNKNOWN IMPORTED)
  set_target_properties(CUDA::cublasLt PROPERTIES
    IMPORTED_LOCATION "${MEGATRON_CUBLASLT_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${MEGATRON_CUBLASLT_INCLUDE_DIR}")
endif()
if(NOT TARGET CUDA::cudart)
  find_library(MEGATRON_CUDART_LIBRARY NAMES cudart libcudart.so.13 libcudart.so.12
               HINTS ${MEGATRON_NVIDIA_WHEEL_LIBS})
  if(NOT MEGATRON_CUDART_LIBRARY)
    message(FATAL_ERROR "megatron: the CUDA runtime (libcudart) was found neither in the CUDA "
                        "toolkit nor in python3's site-packages/nvidia/*")
  endif()
  add_library(CUDA::cudart UNKNOWN IMPORTED)
  set_target_properties(CUDA::cudart PROPERTIES IMPORTED_LOCATION "${MEGATRON_CUDART_LIBRARY}")
endif()
get_target_property(MEGATRON_CUBLASLT_PATH CUDA::cublasLt IMPORTED_LOCATION)
message(STATUS "megatron: NCCL ${NCCL_LIBRARY}, cuBLASLt ${MEGATRON_CUBLASLT_PATH}")
