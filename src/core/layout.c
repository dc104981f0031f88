/* layout: see layout.h. */
#include "core/layout.h"

#include <errno.h>

int kvc_layout_check(const struct kvc_layout *layout)
{
	uint32_t cs = layout->chunk_size;
	if (cs < KVC_LAYOUT_MIN_CHUNK || cs > KVC_LAYOUT_MAX_CHUNK || (cs & (cs - 1)))
		return -EINVAL;
	if (layout->chain_count == 0 || layout->chain_count > KVC_WIRE_MAX_TARGETS)
		return -EINVAL;
	if (layout->stripe == 0 || layout->stripe > layout->chain_count)
		return -EINVAL;
	if (layout->first_chain >= layout->chain_count)
		return -EINVAL;
	return 0;
}

uint32_t kvc_layout_chain(const struct kvc_layout *layout, uint64_t chunk)
{
	uint64_t slot = layout->first_chain + chunk % layout->stripe;
	return (uint32_t)(slot % layout->chain_count);
}

int kvc_layout_split(const struct kvc_layout *layout, uint64_t offset,
                     uint64_t length, struct kvc_layout_piece *pieces,
                     int max_pieces)
{
	uint64_t cs = layout->chunk_size;
	int count = 0;

	if (offset > KVC_LAYOUT_MAX_FILE_SIZE ||
	    length > KVC_LAYOUT_MAX_FILE_SIZE - offset)
		return -EFBIG;
	uint64_t done = 0;
	while (done < length) {
		uint64_t pos = offset + done;
		uint64_t chunk = pos / cs;
		uint64_t in_chunk = pos % cs;
		uint64_t step = cs - in_chunk;
		if (step > length - done)
			step = length - done;
		if (count == max_pieces)
			return -E2BIG;
		pieces[count++] = (struct kvc_layout_piece){
			.chunk = (uint32_t)chunk,
			.chain = kvc_layout_chain(layout, chunk),
			.chunk_offset = (uint32_t)in_chunk,
			.length = (uint32_t)step,
			.buffer_offset = done,
		};
		done += step;
	}
	return count;
}

int kvc_layout_chains(const struct kvc_layout *layout, uint32_t *chains,
                       int max_chains)
{
	int count = 0;
	for (uint32_t i = 0; i < layout->stripe && count < max_chains; i++)
		chains[count++] = kvc_layout_chain(layout, i);
	return count;
}
