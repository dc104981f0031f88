/*
 * kvc/version.h: the version of the kvcfs client surface. The public
 * headers of include/kvc grow with the client API (USRBIO rings, page
 * pools); this one names the release and the wire protocol it speaks.
 */
#ifndef KVC_VERSION_H
#define KVC_VERSION_H

#define KVC_VERSION_MAJOR 0
#define KVC_VERSION_MINOR 1
#define KVC_VERSION_PATCH 0
#define KVC_VERSION_STRING "0.1.0"
/* The wire protocol version this release speaks (see docs/protocol.md). */
#define KVC_PROTOCOL_VERSION 1

#endif
