/*
 * log: one-line, timestamped log records to stderr (the launcher redirects
 * each daemon's stderr to its log file). The level threshold is a process
 * setting owned by the daemon's main; the module keeps no other state.
 */
#ifndef KVC_LOG_H
#define KVC_LOG_H

enum kvc_log_level { KVC_LOG_ERROR, KVC_LOG_WARN, KVC_LOG_INFO, KVC_LOG_DEBUG };

/* Set the lowest level printed (default INFO) and the program's name. */
void kvc_log_setup(const char *program, enum kvc_log_level level);

void kvc_log(enum kvc_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define kvc_log_error(...) kvc_log(KVC_LOG_ERROR, __VA_ARGS__)
#define kvc_log_warn(...) kvc_log(KVC_LOG_WARN, __VA_ARGS__)
#define kvc_log_info(...) kvc_log(KVC_LOG_INFO, __VA_ARGS__)
#define kvc_log_debug(...) kvc_log(KVC_LOG_DEBUG, __VA_ARGS__)

#endif
