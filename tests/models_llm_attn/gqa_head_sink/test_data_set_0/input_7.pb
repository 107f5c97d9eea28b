B	head_sinkJ╔а≈>√
e©Дж8©Йw©