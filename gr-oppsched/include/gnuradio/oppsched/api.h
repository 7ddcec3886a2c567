#pragma once
#include <gnuradio/attributes.h>

#ifdef gnuradio_oppsched_EXPORTS
#define OPPSCHED_API __GR_ATTR_EXPORT
#else
#define OPPSCHED_API __GR_ATTR_IMPORT
#endif
