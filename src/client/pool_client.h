/*
 * pool_client: the page-pool client of include/kvc/meta.h, plus what the
 * tools built with the core need beyond the public API.
 */
#ifndef KVC_POOL_CLIENT_H
#define KVC_POOL_CLIENT_H

#include "core/auth.h"
#include "kvc/meta.h"

/* kvc_meta_open with any credential (kvc-admin proves the cluster secret
 * when it can read it, which also allows POOL_BIND). Returns 0, -ENOMEM
 * or -EINVAL (a role without its key). */
int kvc_meta_open_cred(struct kvc_meta **out, const char *address,
                       const struct kvc_auth_cred *cred);

#endif
