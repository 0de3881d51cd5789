# cmake -P: joins the per-target lowered statements of a multi-target kernel
# (<DIR>/<NAME>-<target>-no_runtime.stmt, written by the generator) into <DIR>/<NAME>.stmt.
file(GLOB parts "${DIR}/${NAME}-*.stmt")
list(SORT parts)
file(WRITE "${DIR}/${NAME}.stmt" "")
foreach (part IN LISTS parts)
    file(READ "${part}" text)
    get_filename_component(part_name "${part}" NAME)
    file(APPEND "${DIR}/${NAME}.stmt" "// ==== ${part_name}\n${text}\n")
endforeach ()
