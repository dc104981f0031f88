#!/usr/bin/env bash
# Build the fio external ioengine (build/fio_kvc.so) against the headers of
# the installed fio's Debian source package, at the installed version.
#   tools/fio/build.sh [BUILD_DIR]      (as root: installs fio, dpkg-dev,
#                                        adds a deb-src entry when missing)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
export DEBIAN_FRONTEND=noninteractive
need=""
for p in fio dpkg-dev; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
done
if [ -n "$need" ]; then apt-get install -y -qq $need >/dev/null; fi
version=$(dpkg-query -W -f='${Version}' fio)
upstream=${version%-*}
SRC=$BUILD/fio-src
if [ ! -f "$SRC/fio-$upstream/config-host.h" ]; then
	if ! apt-get source --print-uris -qq "fio=$version" >/dev/null 2>&1; then
		# Debian's deb822 sources with deb-src added, for apt-get source.
		if [ -f /etc/apt/sources.list.d/debian.sources ]; then
			sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
				> /etc/apt/sources.list.d/kvc-deb-src.sources
		fi
		apt-get update -qq
	fi
	rm -rf "$SRC" && mkdir -p "$SRC"
	(cd "$SRC" && apt-get source -qq --download-only "fio=$version" >/dev/null 2>&1 &&
	 tar xzf "fio_$upstream.orig.tar.gz" &&
	 cd "fio-$upstream" && ./configure --disable-native >/dev/null)
fi
cc -O2 -g -fPIC -shared -D_GNU_SOURCE -D_LARGEFILE_SOURCE -D_FILE_OFFSET_BITS=64 \
	-include "$SRC/fio-$upstream/config-host.h" -I "$SRC/fio-$upstream" -I "$ROOT/include" \
	-Wno-unused-parameter -o "$BUILD/fio_kvc.so" "$ROOT/tools/fio/kvc_engine.c" \
	-L "$BUILD" -lkvc -Wl,-rpath,"$BUILD"
echo "built $BUILD/fio_kvc.so (fio $version)"
