# Included into llama.cpp's configure by `cargo xtask setup` (-DCMAKE_PROJECT_INCLUDE). The
# server's non-compute libraries (common, mtmd, the HTTP server, the server's own code) are
# unity builds at -O1: unity cut a cold llama-server build's CPU time by about 29% on 2 cores,
# and -O1 instead of -O3 compiles those heavy template files (JSON, chat templates, HTTP) in
# ~55% of the time. They parse requests and write the stream, not the tokens: ggml's compute
# code and llama (already a unity build upstream) are built exactly as upstream builds them.
if(PROJECT_NAME STREQUAL "llama.cpp" AND NOT COMMAND inferscope_unity)
  function(inferscope_unity)
    foreach(t llama-common mtmd server-context llama-server-impl)
      if(TARGET ${t})
        set_target_properties(${t} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
      endif()
    endforeach()
    # After the build type's -O3 on the command line, so this one holds.
    foreach(t llama-common-base llama-common mtmd server-context llama-server-impl llama-server
              cpp-httplib)
      if(TARGET ${t})
        target_compile_options(${t} PRIVATE -O1)
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
