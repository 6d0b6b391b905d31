# The Debian package, kev-native_<version>_<arch>.deb (and kev-native-dev_...: headers, static
# libraries, the CMake package), built by CPack from the install rules. scripts/package.sh
# configures the tree for it (prefix /usr, the systemd unit, the Python module's Debian path) and
# runs cpack; scripts/test_package.sh installs it in a clean Debian root and removes it again.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kev-native)
set(CPACK_PACKAGE_VENDOR "kev-native")
set(CPACK_PACKAGE_CONTACT "kev-native maintainers <kev-native@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "native Kev decision models: export, score, serve")
set(CPACK_PACKAGE_DESCRIPTION
    "kev turns a released Kev checkpoint into a hash-verified native bundle and scores System One\n"
    "requests from it on the CPU (kev score, kev serve), with the Python module kev_native.")
set(CPACK_SET_DESTDIR ON)  # /etc/default/kev is an absolute destination
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL Runtime Development)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <name>_<version>-<release>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Runtime package: dependencies from dpkg-shlibdeps over bin/kev and the Python module, plus what
# the module needs beyond shared libraries (its interpreter and numpy).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME kev-native)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
if(KEV_PYTHON_MODULE)
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS
      "python3 (>= ${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}), python3 (<< ${Python_VERSION_MAJOR}.${kev_python_next_minor}), python3-numpy")
endif()
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
include(CPack)
