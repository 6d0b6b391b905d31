# Install rules (`cmake --install`), the CMake package config (find_package(kev) -> kev::kev),
# man pages and bash completion generated from `kev ... --help`, and the Debian package (CPack).
# Layout under the prefix (docs/install.md), by install component (one Debian package each,
# cmake/package.cmake):
#   bin/kev                                   the command (component Runtime: kev-native)
#   include/kev/, lib/libkev_*.a              the library (component Development: kev-native-dev)
#   lib/cmake/kev/                            kevConfig.cmake, kevTargets.cmake (kev::kev;
#                                             Development)
#   share/man/man1/kev.1, kev-<command>.1     one page per command (Runtime, as below)
#   share/bash-completion/completions/kev
#   share/doc/kev-native/                     README.md, docs/
#   share/kev/recipes/, share/kev/examples/   pinned recipes, the example request set
#   lib/systemd/system/kev.service, etc/default/kev   (the Debian package only: KEV_SYSTEMD_UNIT)
#   KEV_PYTHON_INSTALL_DIR/kev_native/        the Python module (component Python:
#                                             python3-kev-native; python/CMakeLists.txt)
include(CMakePackageConfigHelpers)

set(kev_layers kev_core kev_cpu kev_formats kev_head kev_export kev_text kev_model kev_synth
               kev_score kev_serve kev_acceptance)
set_target_properties(kev_all PROPERTIES EXPORT_NAME kev)
add_library(kev::kev ALIAS kev_all)

install(TARGETS kev RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)
install(TARGETS ${kev_layers} kev_all EXPORT kevTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Development)
install(DIRECTORY ${KEV_ROOT}/include/kev DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT Development)
install(EXPORT kevTargets NAMESPACE kev:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kev
        COMPONENT Development)
configure_package_config_file(${KEV_ROOT}/cmake/kevConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/kevConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kev)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kevConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kevConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/kevConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kev COMPONENT Development)

set(kev_docdir ${CMAKE_INSTALL_DATAROOTDIR}/doc/kev-native)
install(FILES ${KEV_ROOT}/README.md DESTINATION ${kev_docdir} COMPONENT Runtime)
install(DIRECTORY ${KEV_ROOT}/docs/ DESTINATION ${kev_docdir}/docs COMPONENT Runtime
        PATTERN notes EXCLUDE)
install(DIRECTORY ${KEV_ROOT}/recipes ${KEV_ROOT}/examples
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/kev COMPONENT Runtime)

# Man pages and bash completion: cmake/cli_docs.py runs the built kev's --help (so they cannot
# drift from the options). Needs to run kev: off when cross-compiling without an emulator.
if(CMAKE_CROSSCOMPILING AND NOT CMAKE_CROSSCOMPILING_EMULATOR)
  set(kev_cli_docs_default OFF)
else()
  set(kev_cli_docs_default ON)
endif()
option(KEV_CLI_DOCS "Generate man pages and bash completion from kev --help" ${kev_cli_docs_default})
if(KEV_CLI_DOCS)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  set(kev_cli_docs_dir ${CMAKE_CURRENT_BINARY_DIR}/cli-docs)
  add_custom_command(
    OUTPUT ${kev_cli_docs_dir}/stamp
    COMMAND ${Python3_EXECUTABLE} ${KEV_ROOT}/cmake/cli_docs.py
            --kev "$<TARGET_FILE:kev>" --version ${PROJECT_VERSION} --out ${kev_cli_docs_dir}
            ${CMAKE_CROSSCOMPILING_EMULATOR}
    COMMAND ${CMAKE_COMMAND} -E touch ${kev_cli_docs_dir}/stamp
    DEPENDS kev ${KEV_ROOT}/cmake/cli_docs.py
    COMMENT "Man pages and bash completion from kev --help"
    VERBATIM)
  add_custom_target(kev_cli_docs ALL DEPENDS ${kev_cli_docs_dir}/stamp)
  install(DIRECTORY ${kev_cli_docs_dir}/man1 DESTINATION ${CMAKE_INSTALL_MANDIR}
          COMPONENT Runtime)
  install(FILES ${kev_cli_docs_dir}/kev.bash RENAME kev
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/bash-completion/completions COMPONENT Runtime)
endif()

# The systemd unit and its environment file: for the Debian package (or an install to /), not
# for a user's prefix. deploy/kev.service says how they are used.
option(KEV_SYSTEMD_UNIT "Install the systemd unit and /etc/default/kev" OFF)
if(KEV_SYSTEMD_UNIT)
  install(FILES ${KEV_ROOT}/deploy/kev.service DESTINATION lib/systemd/system COMPONENT Runtime)
  install(FILES ${KEV_ROOT}/deploy/kev.env RENAME kev DESTINATION /etc/default COMPONENT Runtime)
endif()

include(${KEV_ROOT}/cmake/package.cmake)
