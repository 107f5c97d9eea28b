BasJ
×#<