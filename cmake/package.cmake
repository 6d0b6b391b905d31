# The Debian packages, split as Debian splits them, one per install component, built by CPack
# from the install rules:
#   kev-native_<version>-1_<arch>.deb          component Runtime: the command and server, man
#                                              pages, completion, docs, recipes, the systemd unit;
#                                              no Python
#   python3-kev-native_<version>-1_<arch>.deb  component Python: the module kev_native
#   kev-native-dev_<version>-1_<arch>.deb      component Development: headers, static libraries,
#                                              the CMake package
# scripts/package.sh configures the tree for them (prefix /usr, the systemd unit, the Python
# module's Debian path) and runs cpack; scripts/test_package.sh installs them in a clean Debian
# root and removes them again.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kev-native)
set(CPACK_PACKAGE_VENDOR "kev-native")
set(CPACK_PACKAGE_CONTACT "kev-native maintainers <kev-native@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "native Kev decision models: export, score, serve")
set(CPACK_SET_DESTDIR ON)  # /etc/default/kev is an absolute destination
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL Runtime Development)
if(KEV_PYTHON_MODULE)
  list(APPEND CPACK_COMPONENTS_ALL Python)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <name>_<version>-<release>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Runtime package: dependencies from dpkg-shlibdeps over bin/kev alone (nothing of Python).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME kev-native)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "\
kev turns a released Kev checkpoint into a hash-verified native bundle and scores System One\n\
requests from it on the CPU (kev score; kev serve, with a systemd unit). The Python module\n\
kev_native is the package python3-kev-native.")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${KEV_ROOT}/deploy/debian/conffiles
                                                ${KEV_ROOT}/deploy/debian/prerm
                                                ${KEV_ROOT}/deploy/debian/postinst
                                                ${KEV_ROOT}/deploy/debian/postrm)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Development package: headers, static libraries, kevConfig.cmake; the -dev packages of what
# kevConfig.cmake finds.
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME kev-native-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS
    "kev-native (= ${PROJECT_VERSION}-1), cmake, pkg-config, nlohmann-json3-dev, libssl-dev, libzip-dev, libfmt-dev, libpcre2-dev, libutf8proc-dev, libboost-dev")
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
# Python package: the module; its dependencies from dpkg-shlibdeps over _core*.so, what it needs
# beyond shared libraries (the interpreter it was built for, numpy), and kev-native of the same
# version (the command, docs and recipes of the same release beside it).
if(KEV_PYTHON_MODULE)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-kev-native)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
      "kev-native (= ${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}), python3 (>= ${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}), python3 (<< ${Python_VERSION_MAJOR}.${kev_python_next_minor}), python3-numpy")
  set(CPACK_DEBIAN_PYTHON_DESCRIPTION "\
The Python 3 module kev_native: kev's scoring in-process\n\
(kev_native.Model(bundle).system_one(request) answers as kev serve does).")
  # Its prerm: the module's byte-code caches (written when it was first imported as root) are not
  # in the package's file list; they are removed so that removal leaves nothing behind.
  cmake_path(ABSOLUTE_PATH KEV_PYTHON_INSTALL_DIR BASE_DIRECTORY ${CMAKE_INSTALL_PREFIX}
             OUTPUT_VARIABLE kev_python_module_dir)
  set(kev_python_control_dir ${CMAKE_CURRENT_BINARY_DIR}/debian/python3-kev-native)
  file(CONFIGURE OUTPUT ${kev_python_control_dir}/prerm @ONLY CONTENT [[#!/bin/sh
# python3-kev-native prerm: byte-compiled files of the module (written when it was first
# imported as root) are not in the package's file list; remove them so removal leaves nothing
# behind.
set -e
if [ "$1" = remove ] || [ "$1" = upgrade ] || [ "$1" = deconfigure ]; then
  if command -v py3clean >/dev/null 2>&1; then
    py3clean -p python3-kev-native || true
  fi
  rm -rf @kev_python_module_dir@/kev_native/__pycache__
fi
exit 0
]])
  set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA ${kev_python_control_dir}/prerm)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_STRICT_PERMISSION ON)
endif()
include(CPack)
