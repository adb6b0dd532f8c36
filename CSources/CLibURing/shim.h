/* Debian's liburing-dev 2.3, found through pkg-config `liburing`. Only CStampedeRing's .c files use it. */
#include <liburing.h>
