/* log: see log.h. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

/* Written once by main before threads start, read-only afterwards. */
static const char *log_program = "kvc";
static enum kvc_log_level log_threshold = KVC_LOG_INFO;

void kvc_log_setup(const char *program, enum kvc_log_level level)
{
	log_program = program;
	log_threshold = level;
}

void kvc_log(enum kvc_log_level level, const char *fmt, ...)
{
	static const char *names[] = {"error", "warn", "info", "debug"};
	char line[1024];
	struct timespec now;
	struct tm tm;
	va_list ap;

	if (level > log_threshold)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: ",
	                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	                 tm.tm_min, tm.tm_sec, now.tv_nsec / 1000000, log_program,
	                 names[level]);
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	/* One fputs per record so concurrent threads do not interleave. */
	fprintf(stderr, "%s\n", line);
}
