# layers.cmake — ARCHITECTURE.md's arrows as a configure-time check: fp4lab_fit and fp4lab_reports
# see only store/ and base/ of ours (fit → store, reports → {fit, store}), so neither reaches the
# engine, the sweeps, the kernels or any CUDA library through what it links. Configuring fails,
# naming the path, when one does. tests/layers/ links a program from the two alone as well.

# Every library `target` links, directly or through the libraries it links, as "target" names or
# the plain items (paths, flags) CMake was given.
function(fp4lab_link_closure target out)
  set(seen "")
  set(todo ${target})
  while(todo)
    list(POP_FRONT todo item)
    if(item IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${item})
    if(TARGET ${item})
      get_target_property(type ${item} TYPE)
      set(links "")
      if(NOT type STREQUAL "INTERFACE_LIBRARY")
        get_target_property(direct ${item} LINK_LIBRARIES)
        if(direct)
          list(APPEND links ${direct})
        endif()
      endif()
      get_target_property(iface ${item} INTERFACE_LINK_LIBRARIES)
      if(iface)
        list(APPEND links ${iface})
      endif()
      foreach(l ${links})
        # $<LINK_ONLY:x> and other generator expressions around a name: the name.
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" l "${l}")
        list(APPEND todo ${l})
      endforeach()
    endif()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

foreach(layer fp4lab_fit fp4lab_reports)
  if(NOT TARGET ${layer})
    continue()
  endif()
  fp4lab_link_closure(${layer} closure)
  foreach(item ${closure})
    if(item MATCHES "^(fp4lab_engine|fp4lab_sweeps|fp4lab_kernels.*|fp4lab_nccl|CUDA::.*)$" OR
       item MATCHES "(cuda|cublas|nccl)[^/]*$")
      message(FATAL_ERROR "${layer} links ${item}: fit/ and reports/ may link only store/, base/ "
                          "(and reports/ fit/) of ours, never the engine or a CUDA library (ARCHITECTURE.md)")
    endif()
  endforeach()
endforeach()
