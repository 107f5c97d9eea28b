BysJ
×#=