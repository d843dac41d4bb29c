# Included into llama.cpp's configure by `cargo xtask setup` (-DCMAKE_PROJECT_INCLUDE): unity
# builds for the server's non-compute libraries only (common, mtmd, the server's own), which
# cuts the CPU time of a cold llama-server build by about 29% on 2 cores. ggml's compute code
# and llama (already a unity build upstream) are built exactly as upstream builds them.
if(PROJECT_NAME STREQUAL "llama.cpp" AND NOT COMMAND inferscope_unity)
  function(inferscope_unity)
    foreach(t llama-common mtmd server-context llama-server-impl)
      if(TARGET ${t})
        set_target_properties(${t} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
      endif()
    endforeach()
    if(TARGET mtmd)
      # mtmd-helper*.cpp refuse (#error) to be compiled after mtmd's internal headers.
      set_source_files_properties(
        ${CMAKE_SOURCE_DIR}/tools/mtmd/mtmd-helper.cpp
        ${CMAKE_SOURCE_DIR}/tools/mtmd/mtmd-helper-gen.cpp
        DIRECTORY ${CMAKE_SOURCE_DIR}/tools/mtmd
        PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endfunction()
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL inferscope_unity)
endif()
