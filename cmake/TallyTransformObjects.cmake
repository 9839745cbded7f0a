# TallyTransformObjects.cmake - run by tally_transform() at build time:
# cmake -DTALLY_OPT=... -DOBJECTS=a.o;b.o -DOUT_DIR=... -DLIBRARY=... -DAR=...
#       [-DMETADATA_DIR=...] [-DOPTIONS=...] -P TallyTransformObjects.cmake
# Transforms each object with tally-opt and archives the results.
file(MAKE_DIRECTORY "${OUT_DIR}")
set(_outs)
foreach(obj IN LISTS OBJECTS)
  get_filename_component(_name "${obj}" NAME)
  set(_out "${OUT_DIR}/${_name}")
  set(_meta)
  if(METADATA_DIR)
    file(MAKE_DIRECTORY "${METADATA_DIR}")
    get_filename_component(_stem "${obj}" NAME_WE)
    set(_meta --metadata "${METADATA_DIR}/${_stem}.yaml")
  endif()
  execute_process(
    COMMAND "${TALLY_OPT}" -q "${obj}" -o "${_out}" ${_meta} ${OPTIONS}
    RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "tally-opt failed on ${obj}")
  endif()
  list(APPEND _outs "${_out}")
endforeach()
file(REMOVE "${LIBRARY}")
execute_process(COMMAND "${AR}" qc "${LIBRARY}" ${_outs} RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "could not archive ${LIBRARY}")
endif()
